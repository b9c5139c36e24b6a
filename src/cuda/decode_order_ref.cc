// The decode kernels' order on the CPU (decode_ops.cu): lane partial sums as sequential fused
// multiply-adds, the xor butterfly of the warp shuffles, warp totals added in warp order.
#include "cuda/decode_order_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "cuda/gemv_order_ref.h"
#include "cuda/portable_math.h"

namespace deltafin::cuda {
namespace {

constexpr int kLanes = 32;

// What warp_sum leaves in every lane: at each step lane l adds lane l ^ off's value.
float butterfly(float (&v)[kLanes]) {
  for (int off = kLanes / 2; off > 0; off /= 2) {
    float next[kLanes];
    for (int l = 0; l < kLanes; ++l) next[l] = pm::add(v[l], v[l ^ off]);
    std::memcpy(v, next, sizeof(next));
  }
  return v[0];
}

float fma4(const float* a, const float* b, float p) {
  for (int e = 0; e < 4; ++e) p = pm::fma(a[e], b[e], p);
  return p;
}

}  // namespace

void cpu_order_situ(const float* g, const float* u, int64_t n, float beta, float linear_beta,
                    float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = pm::situ_f32(g[i], u[i], beta, linear_beta);
}

void cpu_order_attn_res(const float* key, const float* blocks, int64_t n_blocks,
                        int64_t block_stride, const float* prefix, int64_t n, int64_t hidden,
                        float eps, float* out) {
  constexpr int kThreads = 256, kWarps = kThreads / kLanes;
  const int64_t ns = n_blocks + 1, chunks = hidden / 4;  // float4s
  auto source = [&](int64_t i, int64_t r) {
    return (i < n_blocks ? blocks + i * block_stride : prefix) + r * hidden;
  };
  std::vector<float> s(ns), p(ns);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < ns; ++i) {
      const float* v = source(i, r);
      // Chunks of 256 float4s: thread t of chunk q takes float4 q·256 + t.
      float cdk = 0.0f, css = 0.0f;
      for (int64_t q = 0; q * kThreads < chunks; ++q) {
        float wdk[kWarps], wss[kWarps];
        for (int w = 0; w < kWarps; ++w) {
          float dk[kLanes], ss[kLanes];
          for (int l = 0; l < kLanes; ++l) {
            const int64_t c = q * kThreads + w * kLanes + l;
            dk[l] = c < chunks ? fma4(v + 4 * c, key + 4 * c, 0.0f) : 0.0f;
            ss[l] = c < chunks ? fma4(v + 4 * c, v + 4 * c, 0.0f) : 0.0f;
          }
          wdk[w] = butterfly(dk);
          wss[w] = butterfly(ss);
        }
        float tdk = wdk[0], tss = wss[0];
        for (int w = 1; w < kWarps; ++w) tdk = pm::add(tdk, wdk[w]);
        for (int w = 1; w < kWarps; ++w) tss = pm::add(tss, wss[w]);
        cdk = q == 0 ? tdk : pm::add(cdk, tdk);
        css = q == 0 ? tss : pm::add(css, tss);
      }
      const float rms = pm::sqrt(pm::add(pm::div(css, static_cast<float>(hidden)), eps));
      s[i] = pm::div(cdk, rms);
    }
    float m = s[0];
    for (int64_t i = 1; i < ns; ++i) m = s[i] > m ? s[i] : m;
    float sum = 0.0f;
    for (int64_t i = 0; i < ns; ++i) {
      p[i] = pm::exp_f32(pm::sub(s[i], m));
      sum = pm::add(sum, p[i]);
    }
    for (int64_t i = 0; i < ns; ++i) p[i] = pm::div(p[i], sum);
    float* o = out + r * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < ns; ++i) acc = pm::fma(p[i], source(i, r)[j], acc);
      o[j] = acc;
    }
  }
}

void cpu_order_route(const RouterShape& sh, const float* logits, const float* bias, int64_t n,
                     int32_t* experts, float* weights) {
  const int ne = sh.n_experts;
  std::vector<float> score(ne), choice(ne);
  std::vector<int> ids;
  for (int64_t r = 0; r < n; ++r) {
    for (int e = 0; e < ne; ++e) {
      score[e] = pm::sigmoid_f32(logits[r * ne + e]);
      choice[e] = pm::add(score[e], bias[e]);
    }
    auto better = [&](int a, int b) {
      return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
    };
    ids.resize(ne);
    std::iota(ids.begin(), ids.end(), 0);
    if (sh.n_groups > 1 && sh.n_groups > sh.topk_groups) {
      const int per = ne / sh.n_groups;
      std::vector<float> gscore(sh.n_groups);
      for (int gi = 0; gi < sh.n_groups; ++gi) {
        std::vector<int> m(ids.begin() + gi * per, ids.begin() + (gi + 1) * per);
        std::sort(m.begin(), m.end(), better);
        gscore[gi] = pm::add(choice[m[0]], per > 1 ? choice[m[1]] : 0.0f);
      }
      std::vector<int> groups(sh.n_groups);
      std::iota(groups.begin(), groups.end(), 0);
      std::sort(groups.begin(), groups.end(), [&](int a, int b) {
        return gscore[a] > gscore[b] || (gscore[a] == gscore[b] && a < b);
      });
      std::vector<bool> keep(sh.n_groups, false);
      for (int i = 0; i < sh.topk_groups; ++i) keep[groups[i]] = true;
      ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int e) { return !keep[e / per]; }),
                ids.end());
    }
    std::sort(ids.begin(), ids.end(), better);
    float sum = 0.0f;
    for (int i = 0; i < sh.top_k; ++i) sum = pm::add(sum, score[ids[i]]);
    for (int i = 0; i < sh.top_k; ++i) {
      float w = score[ids[i]];
      if (sh.renormalize) w = pm::div(w, pm::add(sum, 1e-20f));
      experts[r * sh.top_k + i] = ids[i];
      weights[r * sh.top_k + i] = pm::mul(w, sh.scaling);
    }
  }
}

void cpu_order_kda(const float* q, const float* k, const float* v, const float* g,
                   const float* beta, int64_t n, int64_t n_heads, int64_t dim, float* state,
                   float* o) {
  std::vector<float> decay(dim);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t base = (t * n_heads + h) * dim;
      const float* kt = k + base;
      const float* qt = q + base;
      for (int64_t j = 0; j < dim; ++j) decay[j] = pm::exp_f32(g[base + j]);
      const float b = beta[t * n_heads + h];
      for (int64_t c = 0; c < dim; ++c) {
        float* row = state + (h * dim + c) * dim;
        for (int64_t j = 0; j < dim; ++j) row[j] = pm::mul(row[j], decay[j]);
        float lanes[kLanes];
        for (int l = 0; l < kLanes; ++l)
          lanes[l] = 4 * l < dim ? fma4(row + 4 * l, kt + 4 * l, 0.0f) : 0.0f;
        const float kd = butterfly(lanes);
        const float w = pm::mul(b, pm::sub(v[base + c], kd));
        for (int64_t j = 0; j < dim; ++j) row[j] = pm::fma(w, kt[j], row[j]);
        for (int l = 0; l < kLanes; ++l)
          lanes[l] = 4 * l < dim ? fma4(row + 4 * l, qt + 4 * l, 0.0f) : 0.0f;
        o[base + c] = butterfly(lanes);
      }
    }
  }
}

void cpu_order_short_conv_silu(const float* x, int64_t n, int64_t p, int64_t kernel, const float* w,
                               float* hist, float* y) {
  std::vector<float> win(kernel);
  for (int64_t c = 0; c < p; ++c) {
    for (int64_t i = 0; i + 1 < kernel; ++i) win[i] = hist[i * p + c];
    for (int64_t t = 0; t < n; ++t) {
      win[kernel - 1] = x[t * p + c];
      float acc = 0.0f;
      for (int64_t i = 0; i < kernel; ++i) acc = pm::fma(w[c * kernel + i], win[i], acc);
      y[t * p + c] = pm::silu_f32(acc);
      for (int64_t i = 0; i + 1 < kernel; ++i) win[i] = win[i + 1];
    }
    for (int64_t i = 0; i + 1 < kernel; ++i) hist[i * p + c] = win[i];
  }
}

void cpu_order_l2norm_rows(float* x, int64_t rows, int64_t dim, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    float lanes[kLanes];
    // Lanes from dim/4 on hold zeros (dim < 128).
    for (int l = 0; l < kLanes; ++l)
      lanes[l] = 4 * l < dim ? fma4(v + 4 * l, v + 4 * l, 0.0f) : 0.0f;
    const float inv = pm::div(1.0f, pm::sqrt(pm::add(butterfly(lanes), 1e-6f)));
    for (int64_t j = 0; j < dim; ++j) v[j] = pm::mul(pm::mul(v[j], inv), scale);
  }
}

void cpu_order_kda_gates(float* g, float* beta, int64_t n, int64_t n_heads, int64_t dim,
                         const float* a_log, const float* dt_bias, float lower_bound) {
  for (int64_t e = 0; e < n * n_heads * dim; ++e) {
    const int64_t h = (e / dim) % n_heads, j = e % dim;
    const float a = pm::exp_f32(a_log[h]);
    g[e] = pm::mul(lower_bound, pm::sigmoid_f32(pm::mul(a, pm::add(g[e], dt_bias[h * dim + j]))));
  }
  for (int64_t e = 0; e < n * n_heads; ++e) beta[e] = pm::sigmoid_f32(beta[e]);
}

void cpu_order_mul_sigmoid(const float* gate, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = pm::mul(y[i], pm::sigmoid_f32(gate[i]));
}

void cpu_order_mla_absorbed(const MlaGpuShape& sh, const uint16_t* kv_b, const float* latent,
                            const float* k_pe, int64_t n_positions, const float* q, int64_t n,
                            float* o) {
  using M = MlaGpuShape;
  // The emulation is written for K3's dims (the kernels' tests use them).
  if (sh.rank != M::kRank || sh.nope != M::kNope || sh.rope != M::kRope || sh.v != M::kV)
    throw std::invalid_argument("cpu_order_mla_absorbed: emulates K3's dims (512, 128, 64, 128)");
  constexpr int kRank = M::kRank, kQk = M::kNope + M::kRope, kKvw = M::kNope + M::kV;
  const int64_t nh = sh.n_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kQk));
  std::vector<float> qhat(kRank), obar(kRank), p(n_positions);
  auto bf16 = [](uint16_t b) { return pm::from_bits(static_cast<uint32_t>(b) << 16); };
  for (int64_t r = 0; r < n; ++r) {
    const int64_t len = n_positions - n + r + 1;
    for (int64_t h = 0; h < nh; ++h) {
      const float* qh = q + (r * nh + h) * kQk;
      const uint16_t* wuk = kv_b + h * kKvw * kRank;
      for (int c = 0; c < kRank; ++c) {
        float a = 0.0f;
        for (int i = 0; i < M::kNope; ++i) a = pm::fma(qh[i], bf16(wuk[i * kRank + c]), a);
        qhat[c] = a;
      }
      for (int64_t s = 0; s < len; ++s) {
        const float* ls = latent + s * kRank;
        const float* ks = k_pe + s * M::kRope;
        float nope[kLanes], pe[kLanes];
        for (int l = 0; l < kLanes; ++l) {
          float a = 0.0f;
          for (int m = 0; m < kRank / 128; ++m)
            a = fma4(qhat.data() + 4 * l + 128 * m, ls + 4 * l + 128 * m, a);
          nope[l] = a;
          pe[l] = pm::fma(qh[M::kNope + 2 * l + 1], ks[2 * l + 1],
                          pm::fma(qh[M::kNope + 2 * l], ks[2 * l], 0.0f));
        }
        p[s] = pm::mul(pm::add(butterfly(nope), butterfly(pe)), scale);
      }
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < len; ++s) m = std::max(m, p[s]);
      float warp_total[4];
      for (int w = 0; w < 4; ++w) {
        float lanes[kLanes];
        for (int l = 0; l < kLanes; ++l) {
          float sum = 0.0f;
          for (int64_t s = w * kLanes + l; s < len; s += 128) {
            p[s] = pm::exp_f32(pm::sub(p[s], m));
            sum = pm::add(sum, p[s]);
          }
          lanes[l] = sum;
        }
        warp_total[w] = butterfly(lanes);
      }
      const float total =
          pm::add(pm::add(pm::add(warp_total[0], warp_total[1]), warp_total[2]), warp_total[3]);
      for (int64_t s = 0; s < len; ++s) p[s] = pm::div(p[s], total);
      // ō: a fma chain per chunk of 256 positions (from position 0), chunk sums added in order.
      constexpr int64_t kChunk = 256;
      for (int c = 0; c < kRank; ++c) {
        float total_c = 0.0f;
        for (int64_t s0 = 0; s0 < len; s0 += kChunk) {
          float a = 0.0f;
          for (int64_t s = s0; s < std::min(len, s0 + kChunk); ++s)
            a = pm::fma(p[s], latent[s * kRank + c], a);
          total_c = s0 == 0 ? a : pm::add(total_c, a);
        }
        obar[c] = total_c;
      }
      // W_UV ō in the BF16 GEMV order (gemv.h), which gemv_order_ref.cc already emulates.
      cpu_order_bf16(kv_b + (h * kKvw + M::kNope) * kRank, M::kV, kRank, obar.data(), 1,
                     o + (r * nh + h) * M::kV);
    }
  }
}

}  // namespace deltafin::cuda
