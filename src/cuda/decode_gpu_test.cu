// Tests of the decode kernels (decode_ops.h), part of deltafin_cuda_gpu_tests. Two contracts per
// op:
// - host (runs with or without a GPU): the CPU emulation of the GPU order (decode_order_ref.h) is
//   within a stated tolerance of the repository's reference (src/kernels/*_ref.cc,
//   src/model/router.cc, or an fp64 definition here). The tolerance is needed because the orders
//   differ (the references' 8-lane dot products and mult-then-add steps vs fma chains and warp
//   trees) and because the references' exp/tanh are libm's (fp64 or fp32) where the GPU uses
//   portable_math.h's fp32 functions (<= 2 ulp; CUDA's expf/tanhf would not match the host's).
// - GPU: every output is bit-identical (memcmp) to the emulation, for every row count n = 1..16
//   (a row's bits never depend on the call's other rows; KDA: n tokens in one call == n calls).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "cuda/decode_ops.h"
#include "cuda/decode_order_ref.h"
#include "cuda/gemv.h"
#include "cuda/gemv_order_ref.h"
#include "cuda/gpu_test_util.h"
#include "kernels/activation.h"
#include "kernels/activation_variant.h"
#include "kernels/attn_res.h"
#include "kernels/elementwise.h"
#include "kernels/kda.h"
#include "kernels/short_conv.h"
#include "model/router.h"
#include "quant/bf16.h"

// kernels::attn_res_mix calls kernels::softmax, whose dispatcher (activation.cc) picks an ISA
// variant; this program links no dispatcher and gives it the scalar definition (fp64 exp).
namespace deltafin::kernels {
void softmax(float* x, int64_t n) { detail::ref::softmax(x, n); }
}  // namespace deltafin::kernels

namespace deltafin::cuda {
namespace {

using testing::DeviceBuffer;
using testing::expect;
using testing::invalid_argument_message;
using testing::same_bits;

std::vector<float> normal(std::mt19937& rng, int64_t count, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// The largest |a - b| / scale, and how many exceed tol · scale (scale: a per-element bound).
struct Diff {
  double worst = 0;
  int64_t bad = 0;
  void add(double a, double b, double scale, double tol) {
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) ++bad;
      return;
    }
    const double d = std::fabs(a - b) / scale;
    worst = std::max(worst, d);
    if (d > tol) ++bad;
  }
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// ---- SiTU -------------------------------------------------------------------------------------

// Tolerance vs kernels::detail::ref::situ_glu (fp64 tanh/exp, rounded once): 16 · 2^-24 relative,
// since the GPU's fp32 tanh (<= 1.4 ulp), sigmoid (<= 2 ulp) and the five roundings between them
// measure under 6 ulp; plus 1e-35 absolute, for results that underflow
// (g < -87, where both sides are below 1e-36).
void test_situ(std::mt19937& rng, bool gpu) {
  const int64_t n = 16 * 3072 + 5;
  std::vector<float> g = normal(rng, n, 6.0f), u = normal(rng, n, 30.0f);
  const float special[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 0.625f, -0.625f, 9.5f,  -9.5f,
                           88.0f, -88.0f, 100.0f, -100.0f, 1e4f,   -1e4f,   3e38f, -3e38f};
  const int ns = sizeof(special) / sizeof(special[0]);
  for (int i = 0; i < ns; ++i)
    for (int j = 0; j < ns; ++j) g[i * ns + j] = special[i], u[i * ns + j] = special[j];
  std::vector<float> emu(n), ref(n);
  cpu_order_situ(g.data(), u.data(), n, 4.0f, 25.0f, emu.data());
  kernels::detail::ref::situ_glu(g.data(), u.data(), n, 4.0f, 25.0f, ref.data());
  Diff d;
  for (int64_t i = 0; i < n; ++i) {
    const double scale = std::max(std::fabs(static_cast<double>(ref[i])), 1e-35 * 0x1p24);
    d.add(emu[i], ref[i], scale, 16 * 0x1p-24);
  }
  expect(d.bad == 0, "situ: emulation within 16 ulp of the fp64 reference (" +
                         std::to_string(d.bad) + " outside, worst " + fmt(d.worst * 0x1p24) +
                         " ulp)");
  std::printf("host situ %lld values: worst %.2f ulp from the fp64 reference\n",
              static_cast<long long>(n), d.worst * 0x1p24);
  if (!gpu) return;
  DeviceBuffer<float> d_g(g), d_u(u), d_y(n);
  situ_glu(d_g.ptr, d_u.ptr, n, 4.0f, 25.0f, d_y.ptr);
  expect(same_bits(d_y.download(n).data(), emu.data(), n), "situ: GPU == emulation (memcmp)");
  // Pieces of the vector in separate calls, the second in place over g.
  situ_glu(d_g.ptr, d_u.ptr, 1000, 4.0f, 25.0f, d_y.ptr);
  situ_glu(d_g.ptr + 1000, d_u.ptr + 1000, n - 1000, 4.0f, 25.0f, d_g.ptr + 1000);
  std::vector<float> pieces = d_g.download(n);
  std::copy_n(d_y.download(1000).begin(), 1000, pieces.begin());
  expect(same_bits(pieces.data(), emu.data(), n), "situ: split calls, in place == emulation");
  std::printf("ok   situ %lld values: bit-exact vs emulation, split and in place\n",
              static_cast<long long>(n));
}

// ---- AttnRes ----------------------------------------------------------------------------------

// Tolerance vs kernels::attn_res_mix: 5e-6 of the row's largest |source value| (measured 4.5e-7).
// The scores are sums over `hidden` products in different orders (8-lane fp32 dot vs fma chains and
// a warp tree), off by ~1e-6 relative, and the softmax exps differ (fp64 libm vs portable fp32); a
// weight's relative error is about |Δs| plus 2 ulp, and out = Σ p_i V_i carries it times max |V|.
void test_attn_res(std::mt19937& rng, int64_t hidden, int64_t n_blocks, int64_t max_n, bool gpu) {
  const std::string name =
      "attn_res " + std::to_string(n_blocks) + " blocks + prefix, hidden " + std::to_string(hidden);
  const int64_t stride = max_n * hidden;
  std::vector<float> blocks = normal(rng, std::max<int64_t>(n_blocks, 1) * stride, 1.0f);
  std::vector<float> prefix = normal(rng, stride, 1.0f);
  // Sources of different scales, as the block sums of a real stream are.
  std::uniform_int_distribution<int> ex(-4, 4);
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float s = std::ldexp(1.0f, ex(rng));
    for (int64_t j = 0; j < stride; ++j) blocks[i * stride + j] *= s;
  }
  std::vector<float> key = normal(rng, hidden, 3.0f / std::sqrt(static_cast<float>(hidden)));
  const float eps = 1e-5f;
  std::vector<float> emu(stride), ref(stride);
  cpu_order_attn_res(key.data(), blocks.data(), n_blocks, stride, prefix.data(), max_n, hidden, eps,
                     emu.data());
  kernels::attn_res_mix(key.data(), blocks.data(), n_blocks, stride, prefix.data(), max_n, hidden,
                        eps, ref.data());
  Diff d;
  for (int64_t r = 0; r < max_n; ++r) {
    double vmax = 0;
    for (int64_t i = 0; i <= n_blocks; ++i) {
      const float* v = (i < n_blocks ? blocks.data() + i * stride : prefix.data()) + r * hidden;
      for (int64_t j = 0; j < hidden; ++j) vmax = std::max(vmax, std::fabs(double{v[j]}));
    }
    for (int64_t j = 0; j < hidden; ++j)
      d.add(emu[r * hidden + j], ref[r * hidden + j], vmax, 5e-6);
  }
  expect(d.bad == 0, name + ": emulation within 5e-6·max|V| of kernels::attn_res_mix (" +
                         std::to_string(d.bad) + " outside, worst " + fmt(d.worst) + ")");
  std::printf("host %s: worst |emu-ref|/max|V| = %.3g\n", name.c_str(), d.worst);
  if (!gpu) return;
  DeviceBuffer<float> d_blocks(blocks), d_prefix(prefix), d_key(key), d_out(stride);
  DeviceBuffer<float> d_scratch(attn_res_scratch_floats(max_n, hidden));
  std::vector<float> single(stride);
  for (int64_t r = 0; r < max_n; ++r) {
    attn_res_mix(d_key.ptr, d_blocks.ptr + r * hidden, n_blocks, stride, d_prefix.ptr + r * hidden,
                 1, hidden, eps, d_scratch.ptr, d_out.ptr);
    const auto y = d_out.download(hidden);
    std::copy(y.begin(), y.end(), single.begin() + r * hidden);
  }
  expect(same_bits(single.data(), emu.data(), stride), name + ": n=1 per row == emulation");
  for (int64_t n = 2; n <= max_n; ++n) {
    attn_res_mix(d_key.ptr, d_blocks.ptr, n_blocks, stride, d_prefix.ptr, n, hidden, eps,
                 d_scratch.ptr, d_out.ptr);
    expect(same_bits(d_out.download(n * hidden).data(), emu.data(), n * hidden),
           name + ": n=" + std::to_string(n) + " rows == emulation (memcmp)");
  }
  std::printf("ok   %s n=1..%lld: bit-exact vs emulation, rows independent\n", name.c_str(),
              static_cast<long long>(max_n));
}

// ---- Router -----------------------------------------------------------------------------------

model::RouterConfig cpu_config(const RouterShape& s) {
  return {s.n_experts, s.top_k, s.n_groups, s.topk_groups, s.renormalize, s.scaling};
}

// Against model::route (fp32 libm sigmoid): the same experts in the same rank order (the data's
// choices are far from ties at the 1e-6 level the sigmoids differ by; an exact tie, equal logits,
// is its own row), weights within 2^-19 relative (a few ulp of each score and of their sum).
void test_route_rows(const std::string& name, const RouterShape& sh,
                     const std::vector<float>& logits, const std::vector<float>& bias, int64_t rows,
                     bool gpu) {
  const int k = sh.top_k;
  std::vector<int32_t> emu_e(rows * k), ref_e(rows * k);
  std::vector<float> emu_w(rows * k), ref_w(rows * k);
  cpu_order_route(sh, logits.data(), bias.data(), rows, emu_e.data(), emu_w.data());
  model::RouterScratch scratch;
  for (int64_t r = 0; r < rows; ++r)
    model::route(cpu_config(sh), logits.data() + r * sh.n_experts, bias.data(), scratch,
                 ref_e.data() + r * k, ref_w.data() + r * k);
  Diff d;
  for (int64_t i = 0; i < rows * k; ++i) d.add(emu_w[i], ref_w[i], std::fabs(ref_w[i]), 0x1p-19);
  expect(emu_e == ref_e, name + ": emulation picks model::route's experts in its order");
  expect(d.bad == 0,
         name + ": weights within 2^-19 of model::route's (worst " + fmt(d.worst) + ")");
  std::printf("host %s: experts identical to model::route, weights worst rel %.3g\n", name.c_str(),
              d.worst);
  if (!gpu) return;
  DeviceBuffer<float> d_logits(logits), d_bias(bias), d_w(rows * k);
  DeviceBuffer<int32_t> d_e(rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    route(sh, d_logits.ptr + r * sh.n_experts, d_bias.ptr, 1, d_e.ptr, d_w.ptr);
    expect(same_bits(d_e.download(k).data(), emu_e.data() + r * k, k) &&
               same_bits(d_w.download(k).data(), emu_w.data() + r * k, k),
           name + ": row " + std::to_string(r) + " alone == emulation");
  }
  for (int64_t n = 2; n <= rows; ++n) {
    route(sh, d_logits.ptr, d_bias.ptr, n, d_e.ptr, d_w.ptr);
    expect(same_bits(d_e.download(n * k).data(), emu_e.data(), n * k) &&
               same_bits(d_w.download(n * k).data(), emu_w.data(), n * k),
           name + ": n=" + std::to_string(n) + " rows == emulation (memcmp)");
  }
  std::printf("ok   %s n=1..%lld: experts and weights bit-exact vs emulation\n", name.c_str(),
              static_cast<long long>(rows));
}

void test_route(std::mt19937& rng, const RouterShape& sh, int64_t rows, bool gpu) {
  const std::string name = "route " + std::to_string(sh.n_experts) + " top" +
                           std::to_string(sh.top_k) + " groups " + std::to_string(sh.n_groups) +
                           "/" + std::to_string(sh.topk_groups);
  std::vector<float> logits = normal(rng, rows * sh.n_experts, 2.0f);
  const std::vector<float> bias = normal(rng, sh.n_experts, 0.1f);
  // Last row: every logit equal (and a zero bias would tie every choice; with the bias, ties
  // come from equal bias values): make the first 2·top_k biases equal too.
  std::vector<float> tied_bias = bias;
  for (int e = 0; e < 2 * sh.top_k && e < sh.n_experts; ++e) tied_bias[e] = 0.5f;
  std::fill(logits.end() - sh.n_experts, logits.end(), 0.25f);
  test_route_rows(name, sh, logits, bias, rows - 1, gpu);
  test_route_rows(name + " (ties)", sh, {logits.end() - sh.n_experts, logits.end()}, tied_bias, 1,
                  gpu);
}

// The K3 router end to end on the GPU: BF16 gate [896, 7168] by cuda::matmul (its order is
// cpu_order_bf16, memcmp), then route on the logits.
void test_k3_router(std::mt19937& rng, bool gpu) {
  if (!gpu) return;
  const int64_t ne = 896, hidden = 7168, rows = 16;
  const RouterShape sh{896, 16, 1, 1, true, 1.0f};
  std::vector<uint16_t> w(ne * hidden);
  const std::vector<float> wf = normal(rng, ne * hidden, 0.02f);
  for (int64_t i = 0; i < ne * hidden; ++i) w[i] = quant::f32_to_bf16(wf[i]);
  const std::vector<float> x = normal(rng, rows * hidden, 1.0f), bias = normal(rng, ne, 0.1f);
  std::vector<float> logits(rows * ne);
  cpu_order_bf16(w.data(), ne, hidden, x.data(), rows, logits.data());
  std::vector<int32_t> emu_e(rows * 16);
  std::vector<float> emu_w(rows * 16);
  cpu_order_route(sh, logits.data(), bias.data(), rows, emu_e.data(), emu_w.data());
  DeviceBuffer<uint16_t> d_w(w);
  DeviceBuffer<float> d_x(x), d_logits(rows * ne), d_bias(bias), d_weights(rows * 16);
  DeviceBuffer<int32_t> d_e(rows * 16);
  matmul(DeviceBf16{d_w.ptr, ne, hidden}, d_x.ptr, rows, d_logits.ptr);
  route(sh, d_logits.ptr, d_bias.ptr, rows, d_e.ptr, d_weights.ptr);
  expect(same_bits(d_logits.download(rows * ne).data(), logits.data(), rows * ne),
         "k3 router: gate logits == cpu_order_bf16");
  expect(same_bits(d_e.download(rows * 16).data(), emu_e.data(), rows * 16) &&
             same_bits(d_weights.download(rows * 16).data(), emu_w.data(), rows * 16),
         "k3 router: experts and weights == emulation");
  std::printf("ok   k3 router 16 rows: BF16 gate GEMV + route bit-exact vs emulation\n");
}

// ---- KDA --------------------------------------------------------------------------------------

void l2norm_heads(std::vector<float>& x, int64_t dim, float scale) {
  for (size_t h = 0; h * dim < x.size(); ++h) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += double{x[h * dim + j]} * x[h * dim + j];
    for (int64_t j = 0; j < dim; ++j)
      x[h * dim + j] = static_cast<float>(x[h * dim + j] / std::sqrt(ss + 1e-6) * scale);
  }
}

// Tolerance vs kernels::kda_recurrent: 2e-6 of max |o| for the outputs and of max |S| for the
// final state (measured 2e-7). Per token the orders differ (8-lane dot vs fma chain + warp tree;
// mult-then-add vs fma in the update), e^g differs by <= 1 ulp (libm expf vs portable), and the CPU
// flushes subnormals: ~1e-7 relative per token, carried through the state over the tokens.
void test_kda(std::mt19937& rng, int64_t nh, int64_t tokens, bool gpu, int64_t dim = 128) {
  const std::string name = "kda " + std::to_string(nh) + " heads x " + std::to_string(dim);
  const int64_t width = nh * dim;
  std::vector<float> q = normal(rng, tokens * width, 1.0f), k = normal(rng, tokens * width, 1.0f);
  l2norm_heads(q, dim, 1.0f / std::sqrt(static_cast<float>(dim)));
  l2norm_heads(k, dim, 1.0f);
  const std::vector<float> v = normal(rng, tokens * width, 1.0f);
  std::vector<float> g = normal(rng, tokens * width, 2.0f), beta = normal(rng, tokens * nh, 1.0f);
  for (auto& x : g) x = -5.0f / (1.0f + std::exp(-x));  // K3's gate: lower bound -5
  for (auto& x : beta) x = 1.0f / (1.0f + std::exp(-x));
  const std::vector<float> state0 = normal(rng, nh * dim * dim, 0.3f);

  std::vector<float> emu_s = state0, emu_o(tokens * width);
  cpu_order_kda(q.data(), k.data(), v.data(), g.data(), beta.data(), tokens, nh, dim, emu_s.data(),
                emu_o.data());
  std::vector<float> ref_s = state0, ref_o(tokens * width),
                     scratch(kernels::kda_recurrent_scratch_floats(dim));
  for (int64_t h = 0; h < nh; ++h)
    kernels::kda_recurrent(q.data() + h * dim, k.data() + h * dim, v.data() + h * dim,
                           g.data() + h * dim, beta.data() + h, tokens, dim, width, nh,
                           ref_s.data() + h * dim * dim, ref_o.data() + h * dim, scratch.data());
  double omax = 0, smax = 0;
  for (float x : ref_o) omax = std::max(omax, std::fabs(double{x}));
  for (float x : ref_s) smax = std::max(smax, std::fabs(double{x}));
  Diff dout, dst;
  for (size_t i = 0; i < ref_o.size(); ++i) dout.add(emu_o[i], ref_o[i], omax, 2e-6);
  for (size_t i = 0; i < ref_s.size(); ++i) dst.add(emu_s[i], ref_s[i], smax, 2e-6);
  expect(dout.bad == 0 && dst.bad == 0,
         name + ": emulation within 2e-6 of kernels::kda_recurrent (o worst " + fmt(dout.worst) +
             ", state worst " + fmt(dst.worst) + ")");
  std::printf("host %s, %lld tokens: worst |emu-ref|/max: o %.3g, state %.3g\n", name.c_str(),
              static_cast<long long>(tokens), dout.worst, dst.worst);
  if (!gpu) return;
  DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_g(g), d_beta(beta), d_s(state0),
      d_o(tokens * width);
  // Token by token, keeping every intermediate state.
  std::vector<std::vector<float>> states{state0};
  std::vector<float> seq_o(tokens * width);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t off = t * width;
    kda_decode(d_q.ptr + off, d_k.ptr + off, d_v.ptr + off, d_g.ptr + off, d_beta.ptr + t * nh, 1,
               nh, dim, d_s.ptr, d_o.ptr + off);
    states.push_back(d_s.download(nh * dim * dim));
  }
  seq_o = d_o.download(tokens * width);
  expect(same_bits(seq_o.data(), emu_o.data(), tokens * width) &&
             same_bits(states.back().data(), emu_s.data(), nh * dim * dim),
         name + ": token by token == emulation (o and state, memcmp)");
  for (int64_t m = 2; m <= tokens; ++m) {
    d_s.upload(state0);
    kda_decode(d_q.ptr, d_k.ptr, d_v.ptr, d_g.ptr, d_beta.ptr, m, nh, dim, d_s.ptr, d_o.ptr);
    expect(same_bits(d_o.download(m * width).data(), seq_o.data(), m * width) &&
               same_bits(d_s.download(nh * dim * dim).data(), states[m].data(), nh * dim * dim),
           name + ": " + std::to_string(m) + " tokens in one call == token by token");
  }
  std::printf("ok   %s, 1..%lld tokens: bit-exact vs emulation, one call == token by token\n",
              name.c_str(), static_cast<long long>(tokens));
}

// ---- KDA glue ---------------------------------------------------------------------------------

// Relative tolerance in ulps (2^-24 of the bound), with a floor for results near zero.
bool close_ulps(float a, float b, double bound, double ulps) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::fabs(double{a} - b) <= ulps * 0x1p-24 * bound + 1e-37;
}

// short_conv_silu against kernels::short_conv_silu: 8 ulp of Σ|w·in| + |y| (a 4-tap sum in a
// different order: fma chain vs multiply-then-add; silu's exp portable vs libm expf). GPU: memcmp
// with the emulation token by token, and m tokens in one call == m calls (y and the history).
void test_short_conv(std::mt19937& rng, int64_t p, int64_t kernel, int64_t tokens, bool gpu) {
  const std::string name =
      "short_conv " + std::to_string(p) + " channels, kernel " + std::to_string(kernel);
  const int64_t h = kernel - 1;
  const std::vector<float> x = normal(rng, tokens * p, 2.0f), w = normal(rng, p * kernel, 0.5f),
                           hist0 = normal(rng, h * p, 2.0f);
  std::vector<float> emu_y(tokens * p), ref_y(tokens * p), emu_h = hist0, ref_h = hist0;
  cpu_order_short_conv_silu(x.data(), tokens, p, kernel, w.data(), emu_h.data(), emu_y.data());
  kernels::short_conv_silu(x.data(), tokens, p, kernel, w.data(), ref_h.data(), ref_y.data());
  int64_t bad = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < p; ++c) {
      double abs_sum = 0;
      for (int64_t i = 0; i < kernel; ++i) {
        const int64_t row = t + i;  // of [hist0; x]
        const float in = row < h ? hist0[row * p + c] : x[(row - h) * p + c];
        abs_sum += std::fabs(double{w[c * kernel + i]} * in);
      }
      if (!close_ulps(emu_y[t * p + c], ref_y[t * p + c], abs_sum + std::fabs(ref_y[t * p + c]), 8))
        ++bad;
    }
  expect(bad == 0 && emu_h == ref_h, name +
                                         ": emulation within 8 ulp of kernels::short_conv_silu (" +
                                         std::to_string(bad) + " outside), same history");
  std::printf("host %s, %lld tokens: within 8 ulp of the reference\n", name.c_str(),
              static_cast<long long>(tokens));
  if (!gpu) return;
  DeviceBuffer<float> d_x(x), d_w(w), d_h(hist0), d_y(tokens * p);
  std::vector<std::vector<float>> hists{hist0};
  for (int64_t t = 0; t < tokens; ++t) {
    short_conv_silu(d_x.ptr + t * p, 1, p, kernel, d_w.ptr, d_h.ptr, d_y.ptr + t * p);
    hists.push_back(d_h.download(h * p));
  }
  const std::vector<float> seq_y = d_y.download(tokens * p);
  expect(same_bits(seq_y.data(), emu_y.data(), tokens * p) && hists.back() == emu_h,
         name + ": token by token == emulation (y and history)");
  for (int64_t m = 2; m <= tokens; ++m) {
    d_h.upload(hist0);
    short_conv_silu(d_x.ptr, m, p, kernel, d_w.ptr, d_h.ptr, d_y.ptr);
    expect(same_bits(d_y.download(m * p).data(), seq_y.data(), m * p) &&
               d_h.download(h * p) == hists[m],
           name + ": " + std::to_string(m) + " tokens in one call == token by token");
  }
  std::printf("ok   %s, 1..%lld tokens: bit-exact vs emulation, one call == token by token\n",
              name.c_str(), static_cast<long long>(tokens));
}

// l2norm_rows, kda_gates and mul_sigmoid: element-wise or per row. Against kernels::l2norm_rows,
// kda_decay_lower_bound + apply_sigmoid and mul_sigmoid: 16, 8 + 4|z| and 8 ulp relative (the
// sum of squares in another order, libm expf vs the portable exp; the gate's e^{a_log} may differ
// by an ulp, which sigmoid(z) = sigmoid(e^{a_log}·(g + dt_bias)) multiplies by up to |z|). GPU:
// memcmp with the emulation, and two calls over the halves == one call.
void test_kda_elementwise(std::mt19937& rng, int64_t nh, int64_t n, bool gpu, int64_t dim = 128) {
  const int64_t width = nh * dim, count = n * width;
  const float lower = -5.0f;
  const std::vector<float> x = normal(rng, count, 1.5f), g = normal(rng, count, 2.0f),
                           beta = normal(rng, n * nh, 2.0f), a_log = normal(rng, nh, 1.0f),
                           dt_bias = normal(rng, width, 1.0f), gate = normal(rng, count, 3.0f);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> l2_emu = x, l2_ref = x, g_emu = g, g_ref = g, b_emu = beta, b_ref = beta,
                     ms_emu = x, ms_ref = x;
  cpu_order_l2norm_rows(l2_emu.data(), n * nh, dim, qscale);
  kernels::l2norm_rows(l2_ref.data(), n * nh, dim, qscale);
  cpu_order_kda_gates(g_emu.data(), b_emu.data(), n, nh, dim, a_log.data(), dt_bias.data(), lower);
  kernels::kda_decay_lower_bound(g_ref.data(), n, nh, dim, a_log.data(), dt_bias.data(), lower);
  kernels::apply_sigmoid(b_ref.data(), n * nh);
  cpu_order_mul_sigmoid(gate.data(), count, ms_emu.data());
  kernels::mul_sigmoid(gate.data(), count, ms_ref.data());
  int64_t bad_l2 = 0, bad_g = 0, bad_ms = 0;
  for (int64_t i = 0; i < count; ++i) {
    bad_l2 += !close_ulps(l2_emu[i], l2_ref[i], std::fabs(l2_ref[i]), 16);
    // e^{a_log} may differ by 1 ulp, so z by up to 2 (with the product's rounding), and
    // sigmoid(z) ≈ e^z for z << 0 carries z's relative error times |z| (measured: 35 ulp at -13).
    const int64_t hh = (i / dim) % nh;
    const double z = std::exp(double{a_log[hh]}) * (double{g[i]} + dt_bias[hh * dim + i % dim]);
    bad_g += !close_ulps(g_emu[i], g_ref[i], std::fabs(g_ref[i]), 8 + 4 * std::fabs(z));
    bad_ms += !close_ulps(ms_emu[i], ms_ref[i], std::fabs(ms_ref[i]), 8);
  }
  for (int64_t i = 0; i < n * nh; ++i)
    bad_g += !close_ulps(b_emu[i], b_ref[i], std::fabs(b_ref[i]), 8);
  expect(bad_l2 == 0, "l2norm: emulation within 16 ulp of kernels::l2norm_rows (" +
                          std::to_string(bad_l2) + " outside)");
  expect(bad_g == 0,
         "kda_gates: emulation within 8 + 4|z| ulp of kda_decay_lower_bound/apply_sigmoid (" +
             std::to_string(bad_g) + " outside)");
  expect(bad_ms == 0, "mul_sigmoid: emulation within 8 ulp of kernels::mul_sigmoid (" +
                          std::to_string(bad_ms) + " outside)");
  std::printf("host l2norm, kda_gates, mul_sigmoid (%lld heads, %lld rows): within tolerance\n",
              static_cast<long long>(nh), static_cast<long long>(n));
  if (!gpu) return;
  DeviceBuffer<float> d_x(x), d_g(g), d_b(beta), d_alog(a_log), d_dt(dt_bias), d_gate(gate),
      d_ms(x);
  const int64_t half = n / 2;
  l2norm_rows(d_x.ptr, half * nh, dim, qscale);
  l2norm_rows(d_x.ptr + half * width, (n - half) * nh, dim, qscale);
  expect(same_bits(d_x.download(count).data(), l2_emu.data(), count),
         "l2norm: GPU (two calls) == emulation (memcmp)");
  kda_gates(d_g.ptr, d_b.ptr, half, nh, dim, d_alog.ptr, d_dt.ptr, lower);
  kda_gates(d_g.ptr + half * width, d_b.ptr + half * nh, n - half, nh, dim, d_alog.ptr, d_dt.ptr,
            lower);
  expect(same_bits(d_g.download(count).data(), g_emu.data(), count) &&
             same_bits(d_b.download(n * nh).data(), b_emu.data(), n * nh),
         "kda_gates: GPU (two calls) == emulation (memcmp)");
  mul_sigmoid(d_gate.ptr, count, d_ms.ptr);
  expect(same_bits(d_ms.download(count).data(), ms_emu.data(), count),
         "mul_sigmoid: GPU == emulation (memcmp)");
  std::printf("ok   l2norm, kda_gates, mul_sigmoid: bit-exact vs emulation, split calls\n");
}

// ---- Residual and MoE sums, embedding ----------------------------------------------------------

// These follow the CPU's own order (no emulation needed): add against kernels::add, moe_combine
// against model/moe.cc's combine loop (written out here: Σ over ranks of w·c, multiply then add,
// from 0), embed_rows against quant::bf16_to_f32 of the rows; all by memcmp. Rows independent:
// the first rows alone give the same bits.
void test_sums(std::mt19937& rng, bool gpu) {
  if (!gpu) return;
  const int64_t n = 16, k = 16, width = 3584, hidden = 7168, vocab = 1000;
  const std::vector<float> contrib = normal(rng, n * k * width, 1.0f),
                           weights = normal(rng, n * k, 0.1f), a = normal(rng, n * hidden, 1.0f),
                           b = normal(rng, n * hidden, 1.0f);
  std::vector<float> sum(n * width, 0.0f), added = b;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t rank = 0; rank < k; ++rank)
      for (int64_t j = 0; j < width; ++j)
        sum[r * width + j] += weights[r * k + rank] * contrib[(r * k + rank) * width + j];
  kernels::add(a.data(), n * hidden, added.data());
  std::vector<uint16_t> table(vocab * hidden);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<uint16_t>(rng());
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
  std::vector<float> emb(n * hidden);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < hidden; ++j)
      emb[r * hidden + j] = quant::bf16_to_f32(table[ids[r] * hidden + j]);
  DeviceBuffer<float> d_c(contrib), d_w(weights), d_sum(n * width), d_a(a), d_b(b),
      d_emb(n * hidden);
  DeviceBuffer<uint16_t> d_table(table);
  DeviceBuffer<int32_t> d_ids(ids);
  moe_combine(d_c.ptr, d_w.ptr, 3, k, width, d_sum.ptr);
  expect(same_bits(d_sum.download(3 * width).data(), sum.data(), 3 * width),
         "moe_combine: 3 rows == the CPU loop (memcmp)");
  moe_combine(d_c.ptr, d_w.ptr, n, k, width, d_sum.ptr);
  expect(same_bits(d_sum.download(n * width).data(), sum.data(), n * width),
         "moe_combine: 16 rows == the CPU loop (memcmp)");
  // The grouped MoE's order: contrib rows shuffled (expert-major), read back through the table.
  std::vector<int32_t> at(n * k);
  for (int64_t i = 0; i < n * k; ++i) at[i] = static_cast<int32_t>(i);
  std::shuffle(at.begin(), at.end(), rng);
  std::vector<float> shuffled(n * k * width);
  for (int64_t sl = 0; sl < n * k; ++sl)
    std::copy_n(contrib.begin() + sl * width, width, shuffled.begin() + at[sl] * width);
  DeviceBuffer<float> d_shuffled(shuffled), d_gathered(n * k * width);
  DeviceBuffer<int32_t> d_at(at);
  moe_combine_rows(d_shuffled.ptr, d_at.ptr, d_w.ptr, n, k, width, d_sum.ptr);
  expect(same_bits(d_sum.download(n * width).data(), sum.data(), n * width),
         "moe_combine_rows: shuffled rows through the table == the CPU loop (memcmp)");
  gather_rows(d_shuffled.ptr, d_at.ptr, n * k, width, d_gathered.ptr);
  expect(same_bits(d_gathered.download(n * k * width).data(), contrib.data(), n * k * width),
         "gather_rows undoes the shuffle (memcmp)");
  DeviceBuffer<float> d_scattered(n * k * width), d_contrib(contrib);
  scatter_rows(d_contrib.ptr, d_at.ptr, n * k, width, d_scattered.ptr);
  expect(same_bits(d_scattered.download(n * k * width).data(), shuffled.data(), n * k * width),
         "scatter_rows makes the shuffle (memcmp)");
  add(d_a.ptr, n * hidden, d_b.ptr);
  expect(same_bits(d_b.download(n * hidden).data(), added.data(), n * hidden),
         "add == kernels::add (memcmp)");
  embed_rows(d_table.ptr, hidden, d_ids.ptr, n, d_emb.ptr);
  expect(same_bits(d_emb.download(n * hidden).data(), emb.data(), n * hidden),
         "embed_rows == bf16_to_f32 of the rows (memcmp, NaN payloads aside)");
  std::printf("ok   moe_combine(_rows), gather_rows, add, embed_rows: bit-identical to the CPU\n");
}

// The device-side task table of one decode row: each rank's gate, up and down point at its
// expert's weights and at that rank's rows; an id outside the experts gets no products and a NaN
// output row. (The products themselves are matmul_grouped's, tested in gemv_gpu_test.cu; the GPU
// model test memcmps this path against the host-routed one.)
void test_expert_tasks(bool gpu) {
  if (!gpu) return;
  const int64_t n_experts = 5, k = 3, inter = 64, width = 32;
  std::vector<DeviceMxfp4Task> table(3 * n_experts);
  std::vector<uint8_t> fake(1);
  for (int64_t e = 0; e < 3 * n_experts; ++e)  // recognizable addresses, never dereferenced
    table[e] =
        DeviceMxfp4Task{fake.data() + 1000 * e, fake.data() + 1000 * e + 7, nullptr, nullptr, 0};
  const std::vector<int32_t> route = {4, 0, 9};  // 9: not an expert
  DeviceBuffer<DeviceMxfp4Task> d_table(table), d_tasks(3 * k);
  DeviceBuffer<int32_t> d_route(route);
  DeviceBuffer<float> x(width), g(k * inter), u(k * inter), ey(k * width);
  expert_tasks_one_row(d_table.ptr, n_experts, d_route.ptr, k, x.ptr, g.ptr, u.ptr, inter, ey.ptr,
                       width, d_tasks.ptr);
  const std::vector<DeviceMxfp4Task> t = d_tasks.download(3 * k);
  bool ok = true;
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t e = route[i];
    const DeviceMxfp4Task &gate = t[2 * i], &up = t[2 * i + 1], &down = t[2 * k + i];
    ok &= gate.packed == table[3 * e].packed && gate.scales == table[3 * e].scales &&
          up.packed == table[3 * e + 1].packed && down.packed == table[3 * e + 2].packed &&
          down.scales == table[3 * e + 2].scales;
    ok &= gate.x == x.ptr && up.x == x.ptr && gate.y == g.ptr + i * inter &&
          up.y == u.ptr + i * inter && down.x == g.ptr + i * inter &&
          down.y == ey.ptr + i * width && gate.n == 1 && up.n == 1 && down.n == 1;
  }
  expect(ok, "expert_tasks_one_row: each rank's products point at its expert and rows");
  const DeviceMxfp4Task &bg = t[4], &bu = t[5], &bd = t[2 * k + 2];
  const std::vector<float> out = ey.download(k * width);
  bool nan_row = true;
  for (int64_t j = 0; j < width; ++j) nan_row &= std::isnan(out[2 * width + j]);
  expect(bg.n == 0 && bu.n == 0 && bd.n == 0 && nan_row,
         "expert_tasks_one_row: an id past the experts gets no products and a NaN row");
  std::printf("ok   expert_tasks_one_row: the table of a decode row\n");
}

// ---- MLA --------------------------------------------------------------------------------------

// The heads one block of the weighted sum takes, each run: 0 is the choice by grid size.
constexpr int kMixHeads[] = {0, 1, 2, 4, 8};
std::string mix_name(int heads) {
  return heads == 0 ? std::string("the chosen mix heads")
                    : std::to_string(heads) + " heads a mix block";
}

// The fp64 definition (expanded form): per position K = W_UK·latent, V = W_UV·latent; softmax of
// (q_nope·K + q_pe·k_pe)/sqrt(192); o = Σ p V. Tolerance of the emulation: 5e-6 of max |o| of the
// row and head (measured 7e-7): fp32 sums of 128-512 products in q̂, scores and ō, and the absorbed
// order itself.
void test_mla(std::mt19937& rng, int64_t nh, int64_t n_positions, int64_t max_n, bool gpu) {
  using M = MlaGpuShape;
  const std::string name =
      "mla " + std::to_string(nh) + " heads, " + std::to_string(n_positions) + " positions";
  const int64_t rank = M::kRank, kvw = M::kNope + M::kV, qk = M::kNope + M::kRope;
  std::vector<uint16_t> kv_b(nh * kvw * rank);
  {
    const std::vector<float> wf = normal(rng, nh * kvw * rank, 0.05f);
    for (size_t i = 0; i < wf.size(); ++i) kv_b[i] = quant::f32_to_bf16(wf[i]);
  }
  const std::vector<float> latent = normal(rng, n_positions * rank, 1.0f),
                           k_pe = normal(rng, n_positions * M::kRope, 1.0f),
                           q = normal(rng, max_n * nh * qk, 1.0f);
  const MlaGpuShape sh{nh};
  std::vector<float> emu(max_n * nh * M::kV);
  cpu_order_mla_absorbed(sh, kv_b.data(), latent.data(), k_pe.data(), n_positions, q.data(), max_n,
                         emu.data());
  // fp64 reference.
  std::vector<double> kk(n_positions * M::kNope), vv(n_positions * M::kV), p(n_positions);
  Diff d;
  for (int64_t h = 0; h < nh; ++h) {
    const uint16_t* wh = kv_b.data() + h * kvw * rank;
    for (int64_t s = 0; s < n_positions; ++s)
      for (int64_t i = 0; i < kvw; ++i) {
        double a = 0;
        for (int64_t c = 0; c < rank; ++c)
          a += double{quant::bf16_to_f32(wh[i * rank + c])} * latent[s * rank + c];
        (i < M::kNope ? kk[s * M::kNope + i] : vv[s * M::kV + i - M::kNope]) = a;
      }
    for (int64_t r = 0; r < max_n; ++r) {
      const float* qh = q.data() + (r * nh + h) * qk;
      const int64_t len = n_positions - max_n + r + 1;
      double m = -1e300, sum = 0;
      for (int64_t s = 0; s < len; ++s) {
        double a = 0;
        for (int64_t i = 0; i < M::kNope; ++i) a += double{qh[i]} * kk[s * M::kNope + i];
        for (int64_t i = 0; i < M::kRope; ++i)
          a += double{qh[M::kNope + i]} * k_pe[s * M::kRope + i];
        p[s] = a / std::sqrt(192.0);
        m = std::max(m, p[s]);
      }
      for (int64_t s = 0; s < len; ++s) sum += p[s] = std::exp(p[s] - m);
      std::vector<double> o(M::kV, 0.0);
      double omax = 0;
      for (int64_t c = 0; c < M::kV; ++c) {
        for (int64_t s = 0; s < len; ++s) o[c] += p[s] / sum * vv[s * M::kV + c];
        omax = std::max(omax, std::fabs(o[c]));
      }
      for (int64_t c = 0; c < M::kV; ++c) d.add(emu[(r * nh + h) * M::kV + c], o[c], omax, 5e-6);
    }
  }
  expect(d.bad == 0, name + ": emulation within 5e-6·max|o| of the fp64 expanded form (worst " +
                         fmt(d.worst) + ")");
  std::printf("host %s: worst |emu-ref|/max|o| = %.3g\n", name.c_str(), d.worst);
  if (!gpu) return;
  DeviceBuffer<uint16_t> d_kvb(kv_b);
  DeviceBuffer<float> d_lat(latent), d_kpe(k_pe), d_q(q), d_o(max_n * nh * M::kV),
      d_scratch(mla_absorbed_gpu_scratch_floats(sh, max_n, n_positions));
  const int64_t row = nh * M::kV;
  // The weighted sum's every heads-per-block choice (0: the one the grid size picks).
  for (const int heads : kMixHeads) {
    detail::set_mla_mix_heads(heads);
    const std::string with = name + ", " + mix_name(heads);
    for (int64_t r = 0; r < max_n; ++r) {
      mla_absorbed(sh, d_kvb.ptr, d_lat.ptr, d_kpe.ptr, n_positions - max_n + r + 1,
                   d_q.ptr + r * nh * qk, 1, d_scratch.ptr, d_o.ptr);
      expect(same_bits(d_o.download(row).data(), emu.data() + r * row, row),
             with + ": row " + std::to_string(r) + " alone == emulation");
    }
    for (int64_t n = 2; n <= max_n; ++n) {
      mla_absorbed(sh, d_kvb.ptr, d_lat.ptr, d_kpe.ptr, n_positions - max_n + n, d_q.ptr, n,
                   d_scratch.ptr, d_o.ptr);
      expect(same_bits(d_o.download(n * row).data(), emu.data(), n * row),
             with + ": n=" + std::to_string(n) + " rows == emulation (memcmp)");
    }
  }
  detail::set_mla_mix_heads(0);
  std::printf("ok   %s n=1..%lld, every mix block: bit-exact vs emulation, rows independent\n",
              name.c_str(), static_cast<long long>(max_n));
}

// The mix knob takes the compiled head counts and 0 (the choice), and refuses any other.
void test_mla_mix_knob() {
  for (const int heads : kMixHeads) {
    const std::string m = invalid_argument_message([&] { detail::set_mla_mix_heads(heads); });
    expect(m.empty(), mix_name(heads) + " is accepted: '" + m + "'");
  }
  for (const int heads : {3, 16, -1}) {
    const std::string m = invalid_argument_message([&] { detail::set_mla_mix_heads(heads); });
    expect(m.find("heads is " + std::to_string(heads)) != std::string::npos,
           std::to_string(heads) + " heads a mix block is refused: '" + m + "'");
  }
  detail::set_mla_mix_heads(0);
  std::printf("ok   mla mix switch: 0, 1, 2, 4 and 8 heads accepted, others refused\n");
}

// Absorbed MLA at dims below K3's (the k3-tiny-a oracle's rank 32, nope 16, rope 8, v 16: idle
// lanes and threads), GPU only: against the fp64 expanded form within 5e-6·max|o| per row and
// head (the emulation is K3's), and each row of an n-row call bit-identical to the row alone.
void test_mla_small(std::mt19937& rng, const MlaGpuShape& sh, int64_t n_positions, int64_t max_n,
                    bool gpu) {
  if (!gpu) return;
  const std::string name = "mla rank " + std::to_string(sh.rank) + ", nope " +
                           std::to_string(sh.nope) + ", rope " + std::to_string(sh.rope) + ", v " +
                           std::to_string(sh.v) + ", " + std::to_string(n_positions) + " positions";
  const int64_t nh = sh.n_heads, rank = sh.rank, kvw = sh.nope + sh.v, qk = sh.nope + sh.rope;
  std::vector<uint16_t> kv_b(nh * kvw * rank);
  {
    const std::vector<float> wf = normal(rng, nh * kvw * rank, 0.2f);
    for (size_t i = 0; i < wf.size(); ++i) kv_b[i] = quant::f32_to_bf16(wf[i]);
  }
  const std::vector<float> latent = normal(rng, n_positions * rank, 1.0f),
                           k_pe = normal(rng, n_positions * sh.rope, 1.0f),
                           q = normal(rng, max_n * nh * qk, 1.0f);
  DeviceBuffer<uint16_t> d_kvb(kv_b);
  DeviceBuffer<float> d_lat(latent), d_kpe(k_pe), d_q(q), d_o(max_n * nh * sh.v),
      d_scratch(mla_absorbed_gpu_scratch_floats(sh, max_n, n_positions));
  const int64_t row = nh * sh.v;
  std::vector<float> alone(max_n * row);
  for (int64_t r = 0; r < max_n; ++r) {
    mla_absorbed(sh, d_kvb.ptr, d_lat.ptr, d_kpe.ptr, n_positions - max_n + r + 1,
                 d_q.ptr + r * nh * qk, 1, d_scratch.ptr, d_o.ptr);
    const std::vector<float> o = d_o.download(row);
    std::copy(o.begin(), o.end(), alone.begin() + r * row);
  }
  Diff d;
  for (int64_t h = 0; h < nh; ++h) {
    const uint16_t* wh = kv_b.data() + h * kvw * rank;
    for (int64_t r = 0; r < max_n; ++r) {
      const float* qh = q.data() + (r * nh + h) * qk;
      const int64_t len = n_positions - max_n + r + 1;
      std::vector<double> p(len), o(sh.v, 0.0);
      double m = -1e300, sum = 0, omax = 0;
      for (int64_t s = 0; s < len; ++s) {
        double a = 0;
        for (int64_t i = 0; i < sh.nope; ++i) {
          double kn = 0;
          for (int64_t c = 0; c < rank; ++c)
            kn += double{quant::bf16_to_f32(wh[i * rank + c])} * latent[s * rank + c];
          a += double{qh[i]} * kn;
        }
        for (int64_t i = 0; i < sh.rope; ++i) a += double{qh[sh.nope + i]} * k_pe[s * sh.rope + i];
        p[s] = a / std::sqrt(static_cast<double>(qk));
        m = std::max(m, p[s]);
      }
      for (int64_t s = 0; s < len; ++s) sum += p[s] = std::exp(p[s] - m);
      for (int64_t c = 0; c < sh.v; ++c) {
        for (int64_t s = 0; s < len; ++s) {
          double vv = 0;
          for (int64_t j = 0; j < rank; ++j)
            vv += double{quant::bf16_to_f32(wh[(sh.nope + c) * rank + j])} * latent[s * rank + j];
          o[c] += p[s] / sum * vv;
        }
        omax = std::max(omax, std::fabs(o[c]));
      }
      for (int64_t c = 0; c < sh.v; ++c) d.add(alone[r * row + h * sh.v + c], o[c], omax, 5e-6);
    }
  }
  expect(d.bad == 0,
         name + ": GPU within 5e-6·max|o| of the fp64 expanded form (worst " + fmt(d.worst) + ")");
  for (const int heads : kMixHeads) {
    detail::set_mla_mix_heads(heads);
    for (int64_t n = 1; n <= max_n; ++n) {
      mla_absorbed(sh, d_kvb.ptr, d_lat.ptr, d_kpe.ptr, n_positions - max_n + n, d_q.ptr, n,
                   d_scratch.ptr, d_o.ptr);
      expect(same_bits(d_o.download(n * row).data(), alone.data(), n * row),
             name + ", " + mix_name(heads) + ": n=" + std::to_string(n) +
                 " rows == each row alone (memcmp)");
    }
  }
  detail::set_mla_mix_heads(0);
  std::printf("ok   %s n=1..%lld: worst |gpu-ref|/max|o| = %.3g, rows independent\n", name.c_str(),
              static_cast<long long>(max_n), d.worst);
}

// ---- lm_head ----------------------------------------------------------------------------------

// The lm_head at K3's shape (BF16 [163840, 7168]) through cuda::matmul, and argmax_rows on its
// logits. Every 37th vocabulary row (and the last) is emulated (cpu_order_bf16, memcmp) for each
// activation row; the other n compare with n = 1 whole. Two equal weight rows make a planted tie
// at the top of activation row 0: argmax must take the lower id. GPU only (2.35 GB of weights).
void test_lm_head(bool gpu) {
  if (!gpu) return;
  const int64_t vocab = 163840, hidden = 7168, max_n = 4;
  std::vector<uint16_t> w(vocab * hidden);
  uint64_t h = 0x9e3779b97f4a7c15u;
  for (auto& b : w) {
    h = h * 6364136223846793005u + 1442695040888963407u;
    const auto r = static_cast<uint32_t>(h >> 33);
    // sign, exponent 2^-8..2^-6, 7 mantissa bits
    b = static_cast<uint16_t>(((r & 1u) << 15) | ((119u + (r >> 1) % 3u) << 7) |
                              ((r >> 8) & 0x7fu));
  }
  std::mt19937 rng(163840);
  const std::vector<float> x = normal(rng, max_n * hidden, 1.0f);
  const int64_t top = 1000, twin = 150000;  // rows aligned with x row 0, equal to each other
  for (int64_t c = 0; c < hidden; ++c) {
    w[top * hidden + c] = quant::f32_to_bf16(x[c] > 0 ? 0.05f : -0.05f);
    w[twin * hidden + c] = w[top * hidden + c];
  }
  DeviceBuffer<uint16_t> d_w(w);
  DeviceBuffer<float> d_x(x), d_y(max_n * vocab), d_vals(max_n);
  DeviceBuffer<int32_t> d_ids(max_n);
  const DeviceBf16 dw{d_w.ptr, vocab, hidden};
  std::vector<float> single(max_n * vocab);
  for (int64_t i = 0; i < max_n; ++i) {
    matmul(dw, d_x.ptr + i * hidden, 1, d_y.ptr);
    const auto y = d_y.download(vocab);
    std::copy(y.begin(), y.end(), single.begin() + i * vocab);
  }
  std::vector<int64_t> sample;
  for (int64_t r = 0; r < vocab; r += 37) sample.push_back(r);
  sample.push_back(vocab - 1);
  bool emulated = true;
  for (int64_t i = 0; i < max_n; ++i)
    for (const int64_t r : sample) {
      float e = 0;
      cpu_order_bf16(w.data() + r * hidden, 1, hidden, x.data() + i * hidden, 1, &e);
      emulated = emulated && same_bits(&e, single.data() + i * vocab + r, 1);
    }
  expect(emulated, "lm_head 163840x7168: sampled rows == cpu_order_bf16 (memcmp)");
  for (int64_t n = 2; n <= max_n; ++n) {
    matmul(dw, d_x.ptr, n, d_y.ptr);
    expect(same_bits(d_y.download(n * vocab).data(), single.data(), n * vocab),
           "lm_head: n=" + std::to_string(n) + " rows == n=1 rows (memcmp)");
  }
  d_y.upload(single);
  argmax_rows(d_y.ptr, max_n, vocab, d_ids.ptr, d_vals.ptr);
  const auto ids = d_ids.download(max_n);
  const auto vals = d_vals.download(max_n);
  bool argmax_ok = ids[0] == top;
  for (int64_t i = 0; i < max_n; ++i) {
    const float* row = single.data() + i * vocab;
    const int64_t best = std::max_element(row, row + vocab) - row;  // first of the largest
    argmax_ok = argmax_ok && ids[i] == best && same_bits(&vals[i], row + best, 1);
  }
  expect(argmax_ok, "lm_head argmax == CPU argmax, tie at the top to the lower id (" +
                        std::to_string(ids[0]) + ")");
  std::printf(
      "ok   lm_head 163840x7168 n=1..%lld: sampled rows bit-exact, rows independent, "
      "argmax with a planted tie\n",
      static_cast<long long>(max_n));
}

void test_decode_bad_shapes(bool gpu) {
  if (!gpu) return;
  DeviceBuffer<float> buf(1024);
  const std::string m1 = invalid_argument_message(
      [&] { kda_decode(buf.ptr, buf.ptr, buf.ptr, buf.ptr, buf.ptr, 1, 1, 24, buf.ptr, buf.ptr); });
  expect(m1.find("dim is 24") != std::string::npos, "kda dim 24 is refused: '" + m1 + "'");
  const std::string m2 = invalid_argument_message([&] {
    route(RouterShape{8, 9}, buf.ptr, buf.ptr, 1, reinterpret_cast<int32_t*>(buf.ptr), buf.ptr);
  });
  expect(m2.find("top_k is 9") != std::string::npos,
         "route top_k > n_experts is refused: '" + m2 + "'");
  const std::string m3 = invalid_argument_message([&] {
    attn_res_mix(buf.ptr, buf.ptr, 1, 1000, buf.ptr, 1, 1000, 1e-5f, buf.ptr, buf.ptr + 1);
  });
  expect(m3.find("aligned") != std::string::npos,
         "attn_res misaligned out is refused: '" + m3 + "'");
}

}  // namespace

void run_decode_tests(bool gpu) {
  std::mt19937 rng(20261204);
  test_situ(rng, gpu);
  test_attn_res(rng, 7168, 8, 16, gpu);  // K3: the output mix sees 8 blocks + the prefix
  test_attn_res(rng, 7168, 0, 3, gpu);   // the first layer: the prefix alone
  test_attn_res(rng, 1000, 3, 5, gpu);   // a partial column chunk
  test_route(rng, RouterShape{896, 16, 1, 1, true, 1.0f}, 17, gpu);  // K3
  test_route(rng, RouterShape{256, 8, 8, 4, true, 2.5f}, 9, gpu);    // DeepSeek-V3 style groups
  test_route(rng, RouterShape{60, 6, 1, 1, false, 1.5f}, 5, gpu);    // no renormalization
  test_k3_router(rng, gpu);
  test_kda(rng, 12, 16, gpu);
  test_kda(rng, 96, 2, gpu);                // K3's head count
  test_kda(rng, 4, 16, gpu, 16);            // the k3-tiny-a oracle's heads: 12 idle lanes
  test_short_conv(rng, 12288, 4, 16, gpu);  // K3: q, k, v each 12288 channels, kernel 4
  test_short_conv(rng, 1000, 3, 5, gpu);    // a partial block, another kernel size
  test_kda_elementwise(rng, 96, 16, gpu);
  test_kda_elementwise(rng, 4, 16, gpu, 16);
  test_sums(rng, gpu);
  test_expert_tasks(gpu);
  test_mla_mix_knob();
  test_mla(rng, 4, 270, 16, gpu);  // rows see 255..270 positions: one chunk, then two
  test_mla(rng, 96, 40, 2, gpu);   // K3's head count
  test_mla(rng, 20, 600, 3, gpu);  // three chunks; the last group of 8 heads is part-full
  test_mla_small(rng, MlaGpuShape{4, 32, 16, 8, 16}, 270, 16, gpu);  // the k3-tiny-a oracle's
  test_lm_head(gpu);
  test_decode_bad_shapes(gpu);
}

}  // namespace deltafin::cuda
