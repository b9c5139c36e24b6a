// GPU tests of the GEMV kernels (gemv.h) against the CPU: bit-exact against the emulated GPU
// order (gemv_order_ref.h), within the fp32 error bound of the repository's fp64 scalar
// reference (src/kernels/matmul_ref.cc), and row-count independence (n = 1..16 and beyond, memcmp).
// Exits 77 (ctest: skipped) without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/expert_runs.h"
#include "cuda/gemv.h"
#include "cuda/gemv_knobs.h"
#include "cuda/gemv_launch.cuh"
#include "cuda/gemv_mxfp4_pairs.h"
#include "cuda/gemv_mxfp4_tc.h"
#include "cuda/gemv_order_ref.h"
#include "cuda/gpu_test_util.h"
#include "cuda/norm.h"
#include "kernels/activation_variant.h"
#include "kernels/matmul_variant.h"
#include "quant/bf16.h"
#include "quant/mxfp4.h"

namespace deltafin::cuda {
namespace {

using testing::DeviceBuffer;
using testing::DeviceCodes;

using testing::expect;
using testing::invalid_argument_message;
using testing::Mxfp4Host;
using testing::random_mxfp4;
using testing::random_x;
using testing::same_bits;

// |gpu - exact| <= (terms + 2) * 2^-24 * sum |w x|: the classic bound for a chain of fp32
// roundings, with terms = the longest chain (per-lane FMAs plus the 5 butterfly adds).
bool within_bound(float gpu, double exact, double abs_sum, int64_t terms) {
  if (std::isnan(exact)) return std::isnan(gpu);
  return std::fabs(gpu - exact) <= (terms + 2) * std::ldexp(1.0, -24) * abs_sum + 1e-30;
}

void test_mxfp4(std::mt19937& rng, int64_t rows, int64_t cols, int64_t max_n, bool special) {
  const std::string name = "mxfp4 " + std::to_string(rows) + "x" + std::to_string(cols);
  Mxfp4Host w = random_mxfp4(rng, rows, cols);
  if (special) {
    w.scales[0] = 255;                             // row 0: NaN
    w.scales[(rows - 1) * (cols / 32)] = 0;        // subnormal 2^-127 scale
    w.scales[(rows / 2) * (cols / 32) + 1] = 200;  // 2^73: large, still finite
    for (int64_t c = 0; c < cols / 2; ++c)
      w.packed[(rows / 2) * (cols / 2) + c] &= 0x11;  // tiny codes
  }
  const std::vector<float> x = random_x(rng, max_n * cols);
  DeviceCodes d_packed(w.packed);
  DeviceBuffer<uint8_t> d_scales(w.scales);
  DeviceBuffer<float> d_x(x), d_y(max_n * rows);
  const DeviceMxfp4 dw{d_packed.ptr, d_scales.ptr, rows, cols};

  // The CPU truths for all max_n rows at once.
  std::vector<float> emulated(max_n * rows), ref(max_n * rows);
  cpu_order_mxfp4(w.packed.data(), w.scales.data(), rows, cols, x.data(), max_n, emulated.data());
  const kernels::Mxfp4Matrix cw{w.packed.data(), w.scales.data(), rows, cols};
  kernels::detail::ref::mxfp4_rows(cw, x.data(), max_n, ref.data(), 0, rows);
  std::vector<float> dense(rows * cols);
  quant::dequant_mxfp4_rows(w.packed.data(), w.scales.data(), cols, 0, rows, dense.data());

  // n = 1 alone on each activation row: the result every batch must reproduce.
  std::vector<float> single(max_n * rows);
  for (int64_t i = 0; i < max_n; ++i) {
    matmul(dw, d_x.ptr + i * cols, 1, d_y.ptr);
    const auto y = d_y.download(rows);
    std::copy(y.begin(), y.end(), single.begin() + i * rows);
  }
  expect(same_bits(single.data(), emulated.data(), max_n * rows), name + ": n=1 == CPU emulation");

  for (int64_t n = 2; n <= max_n; ++n) {
    matmul(dw, d_x.ptr, n, d_y.ptr);
    const auto y = d_y.download(n * rows);
    expect(same_bits(y.data(), single.data(), n * rows),
           name + ": n=" + std::to_string(n) + " rows == n=1 rows (memcmp)");
  }

  int bad = 0;
  float worst = 0;
  for (int64_t i = 0; i < max_n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      double abs_sum = 0;
      for (int64_t c = 0; c < cols; ++c)
        abs_sum += std::fabs(static_cast<double>(dense[r * cols + c]) * x[i * cols + c]);
      const float g = single[i * rows + r], e = ref[i * rows + r];
      if (!within_bound(g, e, abs_sum, cols / 32 / 32 + 1 + 32 + 5)) ++bad;
      if (!std::isnan(e)) worst = std::fmax(worst, std::fabs(g - e) / static_cast<float>(abs_sum));
    }
  expect(bad == 0, name + ": within the fp32 bound of the fp64 reference (" + std::to_string(bad) +
                       " outside)");
  std::printf(
      "ok   %s n=1..%lld: bit-exact vs emulation, rows independent, max |gpu-ref|/sum|wx| = %.3g\n",
      name.c_str(), static_cast<long long>(max_n), worst);
}

}  // namespace

// matmul_grouped: tasks of different n (0..max_n) and activations in one launch; each task's
// output must be bit-identical to matmul() of that task alone (itself checked against the
// emulation above), and nothing past a task's n rows may be written. tensor_cores: the same for
// matmul_grouped_tc against matmul_tc (gemv_mxfp4_tc_test.cu).
void test_mxfp4_grouped(std::mt19937& rng, int64_t rows, int64_t cols, int count, int64_t max_n,
                        bool tensor_cores) {
  const std::string name = std::string(tensor_cores ? "mxfp4 tc grouped " : "mxfp4 grouped ") +
                           std::to_string(count) + "x" + std::to_string(rows) + "x" +
                           std::to_string(cols) + " max_n=" + std::to_string(max_n);
  std::vector<Mxfp4Host> ws;
  std::deque<DeviceCodes> packed;  // deque: the buffers cannot move
  std::deque<DeviceBuffer<uint8_t>> scales;
  for (int t = 0; t < count; ++t) {
    ws.push_back(random_mxfp4(rng, rows, cols));
    packed.emplace_back(ws.back().packed);
    scales.emplace_back(ws.back().scales);
  }
  const std::vector<float> x = random_x(rng, count * max_n * cols);
  DeviceBuffer<float> d_x(x), d_y(count * max_n * rows), d_single(max_n * rows);
  const float kCanary = -1234.5f;
  d_y.upload(std::vector<float>(count * max_n * rows, kCanary));
  std::vector<DeviceMxfp4Task> tasks;
  for (int t = 0; t < count; ++t) {
    const int n = static_cast<int>(t % (max_n + 1));  // 0..max_n, the last task max_n
    tasks.push_back({packed[t].ptr, scales[t].ptr, d_x.ptr + t * max_n * cols,
                     d_y.ptr + t * max_n * rows, t == count - 1 ? static_cast<int>(max_n) : n});
  }
  DeviceBuffer<DeviceMxfp4Task> d_tasks(tasks);
  if (tensor_cores)
    matmul_grouped_tc(d_tasks.ptr, count, rows, cols, max_n);
  else
    matmul_grouped(d_tasks.ptr, count, rows, cols, max_n);
  const auto y = d_y.download(count * max_n * rows);
  bool same = true, untouched = true;
  for (int t = 0; t < count; ++t) {
    const int n = tasks[t].n;
    const DeviceMxfp4 dw{packed[t].ptr, scales[t].ptr, rows, cols};
    if (n > 0 && tensor_cores)
      matmul_tc(dw, tasks[t].x, n, d_single.ptr);
    else if (n > 0)
      matmul(dw, tasks[t].x, n, d_single.ptr);
    const auto single = d_single.download(n * rows);
    same = same && same_bits(y.data() + t * max_n * rows, single.data(), n * rows);
    for (int64_t k = n * rows; k < max_n * rows; ++k)
      untouched = untouched && y[t * max_n * rows + k] == kCanary;
  }
  expect(same, name + ": every task == matmul of the task alone (memcmp)");
  expect(untouched, name + ": rows past a task's n are not written");
  std::printf("ok   %s: tasks bit-identical to single launches\n", name.c_str());
}

namespace {

// The fixed-width kernel's own paths (gemv_mxfp4_pairs.cu, K3's 3072 and 3584 columns at n = 1),
// in every compiled shape: a row count that leaves the last warp step's rows absent but one,
// scales on every side of its 191 switch (one FMA by 2^(s-64) below it, the general kernel's two
// steps above) and NaN, and scales that are not 16-byte aligned (byte loads instead of 16-byte
// copies), single and grouped, each bit-identical to the emulation.
void test_mxfp4_pairs_edges(std::mt19937& rng, int64_t cols, detail::Mxfp4PairsShape shape) {
  // Odd for row pairs; the last 4-row step holds 1 row (301) or 3 (303).
  const int64_t rows = cols == 3584 ? 301 : 303, groups = cols / 32;
  const std::string name = "mxfp4 rows " + std::to_string(shape.rows_per_warp) +
                           " d=" + std::to_string(shape.stages) + " " + std::to_string(rows) + "x" +
                           std::to_string(cols);
  detail::set_mxfp4_pairs_shape(shape);
  Mxfp4Host w = random_mxfp4(rng, rows, cols);
  const uint8_t special[] = {0, 1, 63, 64, 190, 191, 192, 200, 254, 255};
  for (int64_t r = 0; r < rows; r += 7)
    for (int64_t g = r % 5; g < groups; g += 9) w.scales[r * groups + g] = special[(r + g) % 10];
  const std::vector<float> x = random_x(rng, 3 * cols);
  std::vector<float> want(3 * rows);
  cpu_order_mxfp4(w.packed.data(), w.scales.data(), rows, cols, x.data(), 3, want.data());
  DeviceCodes d_packed(w.packed);
  DeviceBuffer<uint8_t> d_scales(w.scales.size() + 16);
  DeviceBuffer<float> d_x(x), d_y(3 * rows);
  for (int offset : {0, 1, 4}) {  // cudaMalloc is 256-byte aligned: 0 takes the 16-byte copies
    const std::string at = name + " scales at +" + std::to_string(offset);
    testing::check(
        cudaMemcpy(d_scales.ptr + offset, w.scales.data(), w.scales.size(), cudaMemcpyHostToDevice),
        "upload");
    const DeviceMxfp4 dw{d_packed.ptr, d_scales.ptr + offset, rows, cols};
    bool same = true;
    for (int i = 0; i < 3; ++i) {
      matmul(dw, d_x.ptr + i * cols, 1, d_y.ptr);
      same = same && same_bits(d_y.download(rows).data(), want.data() + i * rows, rows);
    }
    expect(same, at + ": n=1 == CPU emulation");
    // Three tasks of one launch: n = 1, 0, 1 on activation rows 0 and 2.
    const float kCanary = -1234.5f;
    d_y.upload(std::vector<float>(3 * rows, kCanary));
    std::vector<DeviceMxfp4Task> tasks;
    for (int t = 0; t < 3; ++t)
      tasks.push_back({d_packed.ptr, d_scales.ptr + offset, d_x.ptr + t * cols, d_y.ptr + t * rows,
                       t == 1 ? 0 : 1});
    DeviceBuffer<DeviceMxfp4Task> d_tasks(tasks);
    matmul_grouped(d_tasks.ptr, 3, rows, cols, 1);
    const auto y = d_y.download(3 * rows);
    const bool untouched =
        std::all_of(y.begin() + rows, y.begin() + 2 * rows, [&](float v) { return v == kCanary; });
    expect(same_bits(y.data(), want.data(), rows) &&
               same_bits(y.data() + 2 * rows, want.data() + 2 * rows, rows),
           at + ": grouped tasks == CPU emulation");
    expect(untouched, at + ": a task of n = 0 writes nothing");
  }
  detail::reset_mxfp4_pairs_shape();
  std::printf("ok   %s: odd rows, scales 0..255, unaligned scales, single and grouped\n",
              name.c_str());
}

// The MXFP4 kernel computes on w·2^-126 and x·2^63 (docs/CUDA.md "Exactness"): with activations
// so small that group sums round as subnormals in that scaled domain (|x| ~ 2^-75), or large
// (2^62), the GPU must still equal the emulation bit for bit, rows independent.
void test_mxfp4_scaled_range(std::mt19937& rng) {
  const int64_t rows = 40, cols = 1024, max_n = 9;  // n = 9: the 16-row kernel
  const Mxfp4Host w = random_mxfp4(rng, rows, cols);
  std::vector<float> x = random_x(rng, max_n * cols);
  for (int64_t c = 0; c < cols; ++c) {
    x[c] = std::ldexp(x[c], -75);                             // row 0: tiny
    x[cols + c] = std::ldexp(x[cols + c], c % 2 ? -70 : 56);  // row 1: tiny and large
  }
  DeviceCodes d_packed(w.packed);
  DeviceBuffer<uint8_t> d_scales(w.scales);
  DeviceBuffer<float> d_x(x), d_y(max_n * rows);
  const DeviceMxfp4 dw{d_packed.ptr, d_scales.ptr, rows, cols};
  std::vector<float> emulated(max_n * rows), single(max_n * rows);
  cpu_order_mxfp4(w.packed.data(), w.scales.data(), rows, cols, x.data(), max_n, emulated.data());
  for (int64_t i = 0; i < max_n; ++i) {
    matmul(dw, d_x.ptr + i * cols, 1, d_y.ptr);
    const auto y = d_y.download(rows);
    std::copy(y.begin(), y.end(), single.begin() + i * rows);
  }
  expect(same_bits(single.data(), emulated.data(), max_n * rows),
         "mxfp4 tiny and large activations: n=1 == CPU emulation");
  matmul(dw, d_x.ptr, max_n, d_y.ptr);
  expect(same_bits(d_y.download(max_n * rows).data(), single.data(), max_n * rows),
         "mxfp4 tiny and large activations: n=9 rows == n=1 rows (memcmp)");
  std::printf("ok   mxfp4 tiny and large activations: bit-exact vs emulation\n");
}

void test_bf16(std::mt19937& rng, int64_t rows, int64_t cols, int64_t max_n) {
  const std::string name = "bf16 " + std::to_string(rows) + "x" + std::to_string(cols);
  std::vector<uint16_t> w(rows * cols);
  const std::vector<float> wf = random_x(rng, rows * cols);
  for (int64_t k = 0; k < rows * cols; ++k) w[k] = quant::f32_to_bf16(wf[k]);
  const std::vector<float> x = random_x(rng, max_n * cols);
  DeviceBuffer<uint16_t> d_w(w);
  DeviceBuffer<float> d_x(x), d_y(max_n * rows);
  const DeviceBf16 dw{d_w.ptr, rows, cols};

  std::vector<float> emulated(max_n * rows), ref(max_n * rows);
  cpu_order_bf16(w.data(), rows, cols, x.data(), max_n, emulated.data());
  const kernels::Bf16Matrix cw{w.data(), rows, cols};
  kernels::detail::ref::bf16_rows(cw, x.data(), max_n, ref.data(), 0, rows);

  std::vector<float> single(max_n * rows);
  for (int64_t i = 0; i < max_n; ++i) {
    matmul(dw, d_x.ptr + i * cols, 1, d_y.ptr);
    const auto y = d_y.download(rows);
    std::copy(y.begin(), y.end(), single.begin() + i * rows);
  }
  expect(same_bits(single.data(), emulated.data(), max_n * rows), name + ": n=1 == CPU emulation");
  for (int64_t n = 2; n <= max_n; ++n) {
    matmul(dw, d_x.ptr, n, d_y.ptr);
    const auto y = d_y.download(n * rows);
    expect(same_bits(y.data(), single.data(), n * rows),
           name + ": n=" + std::to_string(n) + " rows == n=1 rows (memcmp)");
  }
  int bad = 0;
  for (int64_t i = 0; i < max_n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      double abs_sum = 0;
      for (int64_t c = 0; c < cols; ++c)
        abs_sum +=
            std::fabs(static_cast<double>(quant::bf16_to_f32(w[r * cols + c])) * x[i * cols + c]);
      if (!within_bound(single[i * rows + r], ref[i * rows + r], abs_sum,
                        cols / 8 / 32 * 8 + 8 + 5))
        ++bad;
    }
  expect(bad == 0, name + ": within the fp32 bound of the fp64 reference (" + std::to_string(bad) +
                       " outside)");
  std::printf("ok   %s n=1..%lld: bit-exact vs emulation, rows independent\n", name.c_str(),
              static_cast<long long>(max_n));
}

// Every BF16 kernel shape compiled for each batch size (detail::bf16_shapes), forced
// one at a time: each output row bit-identical to the n = 1 product, itself checked against the
// CPU emulation, for n that fill a batch size and n that leave rows of it empty; single matrices
// and sibling launches. cols = 1000 leaves a partial last tile; 64, a single tile (fewer tiles
// than a ring's buffers).
void test_bf16_shapes(std::mt19937& rng, int64_t rows, int64_t cols) {
  const std::string name = "bf16 shapes " + std::to_string(rows) + "x" + std::to_string(cols);
  const int64_t max_n = 16;
  std::vector<uint16_t> w(rows * cols);
  const std::vector<float> wf = random_x(rng, rows * cols);
  for (int64_t k = 0; k < rows * cols; ++k) w[k] = quant::f32_to_bf16(wf[k]);
  const std::vector<float> x = random_x(rng, max_n * cols);
  DeviceBuffer<uint16_t> d_w(w);
  DeviceBuffer<float> d_x(x), d_y(max_n * rows), d_y2(max_n * rows);
  const DeviceBf16 dw{d_w.ptr, rows, cols};
  std::vector<float> emulated(max_n * rows), single(max_n * rows);
  cpu_order_bf16(w.data(), rows, cols, x.data(), max_n, emulated.data());
  for (int64_t i = 0; i < max_n; ++i) {
    matmul(dw, d_x.ptr + i * cols, 1, d_y.ptr);
    const auto y = d_y.download(rows);
    std::copy(y.begin(), y.end(), single.begin() + i * rows);
  }
  expect(same_bits(single.data(), emulated.data(), max_n * rows), name + ": n=1 == CPU emulation");
  int shapes = 0;
  // Blocks of the launcher's rows, and of 5 and 27 (part-filled warps, warps with no rows).
  for (const int block_rows : {0, 5, 27}) {
    detail::set_bf16_block_rows(block_rows);
    for (const int64_t n : {1, 2, 3, 4, 5, 8, 13, 16}) {
      const int batch = n <= 2 ? static_cast<int>(n) : n <= 4 ? 4 : n <= 8 ? 8 : 16;
      for (const detail::Bf16Shape& sh : detail::bf16_shapes(batch)) {
        detail::set_bf16_shape(batch, sh);
        const std::string what =
            name + " n=" + std::to_string(n) + " shape " + detail::bf16_shape_name(sh) +
            (block_rows ? " " + std::to_string(block_rows) + "-row blocks" : "");
        matmul(dw, d_x.ptr, n, d_y.ptr);
        expect(same_bits(d_y.download(n * rows).data(), single.data(), n * rows),
               what + ": rows == n=1 rows (memcmp)");
        const DeviceBf16Out outs[2] = {{dw, d_y.ptr},
                                       {DeviceBf16{d_w.ptr, rows / 2, cols}, d_y2.ptr}};
        matmul_siblings(outs, 2, d_x.ptr, n);
        bool same = same_bits(d_y.download(n * rows).data(), single.data(), n * rows);
        const auto half = d_y2.download(n * (rows / 2));
        for (int64_t i = 0; i < n; ++i)
          same &= same_bits(half.data() + i * (rows / 2), single.data() + i * rows, rows / 2);
        expect(same, what + ": siblings == n=1 rows (memcmp)");
        ++shapes;
      }
      detail::set_bf16_shape(batch, {});
    }
  }
  detail::set_bf16_block_rows(0);
  std::printf("ok   %s: %d shape, n and block-row triples bit-identical to n = 1\n", name.c_str(),
              shapes);
}

// Sibling BF16 products of one x in one launch: each output bit-identical to its single matmul,
// for matrices of different row counts (one smaller than a block's rows) and n = 1..max_n.
void test_bf16_siblings(std::mt19937& rng, const std::vector<int64_t>& rows, int64_t cols,
                        int64_t max_n) {
  const std::string name =
      "bf16 siblings x" + std::to_string(rows.size()) + " of " + std::to_string(cols) + " columns";
  const std::vector<float> x = random_x(rng, max_n * cols);
  DeviceBuffer<float> d_x(x);
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> d_w;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> d_y, d_single;
  std::vector<DeviceBf16Out> outs;
  for (const int64_t r : rows) {
    std::vector<uint16_t> w(r * cols);
    const std::vector<float> wf = random_x(rng, r * cols);
    for (int64_t k = 0; k < r * cols; ++k) w[k] = quant::f32_to_bf16(wf[k]);
    d_w.push_back(std::make_unique<DeviceBuffer<uint16_t>>(w));
    d_y.push_back(std::make_unique<DeviceBuffer<float>>(max_n * r));
    d_single.push_back(std::make_unique<DeviceBuffer<float>>(max_n * r));
    outs.push_back({DeviceBf16{d_w.back()->ptr, r, cols}, d_y.back()->ptr});
  }
  bool same = true;
  for (int64_t n = 1; n <= max_n; ++n) {
    matmul_siblings(outs.data(), static_cast<int>(outs.size()), d_x.ptr, n);
    for (size_t t = 0; t < rows.size(); ++t) {
      matmul(outs[t].w, d_x.ptr, n, d_single[t]->ptr);
      same &= same_bits(d_y[t]->download(n * rows[t]).data(),
                        d_single[t]->download(n * rows[t]).data(), n * rows[t]);
    }
  }
  expect(same,
         name + ": every output == its single matmul (memcmp), n = 1.." + std::to_string(max_n));
  std::printf("ok   %s: bit-identical to single launches\n", name.c_str());
}

// RMSNorm against the scalar reference of src/kernels: the same fp32 scale, then the same two
// multiplies, so bit-identical unless the fp64 sum of squares sits on an fp32 rounding boundary.
void test_rmsnorm(std::mt19937& rng, int64_t rows, int64_t n) {
  const std::string name = "rmsnorm " + std::to_string(rows) + "x" + std::to_string(n);
  const float eps = 1e-5f;
  const std::vector<float> x = random_x(rng, rows * n), wf = random_x(rng, n);
  std::vector<uint16_t> wb(n);
  for (int64_t i = 0; i < n; ++i) wb[i] = quant::f32_to_bf16(wf[i]);
  DeviceBuffer<float> d_x(x), d_wf(wf), d_y(rows * n);
  DeviceBuffer<uint16_t> d_wb(wb);
  std::vector<float> ref_f(rows * n), ref_b(rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    kernels::detail::ref::rmsnorm_f32(x.data() + r * n, wf.data(), n, eps, ref_f.data() + r * n);
    kernels::detail::ref::rmsnorm_bf16(x.data() + r * n, wb.data(), n, eps, ref_b.data() + r * n);
  }
  rmsnorm_rows(d_x.ptr, d_wf.ptr, rows, n, eps, d_y.ptr);
  expect(same_bits(d_y.download(rows * n).data(), ref_f.data(), rows * n),
         name + " f32 weights == CPU reference (memcmp)");
  rmsnorm_rows(d_x.ptr, d_wb.ptr, rows, n, eps, d_x.ptr);  // in place
  expect(same_bits(d_x.download(rows * n).data(), ref_b.data(), rows * n),
         name + " bf16 weights, in place == CPU reference (memcmp)");
  std::printf("ok   %s: f32 and bf16 weights bit-identical to the CPU reference\n", name.c_str());
}

// The bench's shape switch, host-side only (no device needed): every listed shape is accepted for
// its batch size, and a shape or batch size that is not compiled is refused by name.
void test_bf16_shape_knob() {
  int listed = 0;
  for (const int n : {1, 2, 4, 8, 16}) {
    const std::vector<detail::Bf16Shape> shapes = detail::bf16_shapes(n);
    expect(!shapes.empty(), "bf16 shapes for n = " + std::to_string(n) + " are listed");
    for (const detail::Bf16Shape& sh : shapes) {
      const std::string m = invalid_argument_message([&] { detail::set_bf16_shape(n, sh); });
      expect(m.empty(), "bf16 shape " + detail::bf16_shape_name(sh) +
                            " is accepted at n = " + std::to_string(n) + ": '" + m + "'");
      ++listed;
    }
    detail::set_bf16_shape(n, {});
  }
  const std::string m1 = invalid_argument_message([] { detail::set_bf16_shape(8, {3, 8, 1, 3}); });
  expect(m1.find("not compiled for n = 8") != std::string::npos,
         "an uncompiled bf16 shape is refused: '" + m1 + "'");
  const std::string m2 = invalid_argument_message([] { detail::set_bf16_shape(3, {}); });
  expect(m2.find("n is 3") != std::string::npos,
         "a batch size that is not compiled is refused: '" + m2 + "'");
  std::printf("ok   bf16 shape switch: %d shapes accepted, uncompiled ones refused\n", listed);
}

// "1536+576+12288": a launch's row counts, for messages.
std::string rows_name(const std::vector<int64_t>& rows) {
  std::string out;
  for (const int64_t r : rows) {
    if (!out.empty()) out.push_back('+');
    out.append(std::to_string(r));
  }
  return out;
}

// gemv.cu's BF16 shape at 8 activation rows on K3's single matrices and the model's sibling
// launches, host-side: for a 132-SM card that holds 2, 2, 1, 2 and 2 blocks an SM of 4/8/1/3+w,
// 4/8/1/4+w, 4/8/2/3, 3/8/2/3 and 3/4/2/3+w (as an H100 and an H200 do), with slow DRAM (an
// H100) and fast (an H200), the pick is the shape measured fastest there (docs/PERFORMANCE.md,
// 2026-12-06 and 2026-12-07; on 7168 rows 3/4/2/3 read 0.7x). Siblings count the blocks of each
// matrix: q_a and kv_a beside g_proj are 600 24-row blocks, not 3 x 512.
void test_bf16_pick_8() {
  struct Case {
    std::vector<int64_t> rows;
    const char* slow;
    const char* fast;
  };
  const Case cases[] = {{{7168}, "4/8/1/3+w", "4/8/1/4+w"},
                        {{12288}, "3/8/2/3", "3/8/2/3"},
                        {{33792}, "4/8/1/3+w", "4/8/1/4+w"},
                        {{6144}, "3/8/2/3", "3/8/2/3"},
                        {{3072}, "3/8/2/4+w", "3/8/2/4+w"},
                        {{1536}, "3/4/2/3+w", "3/4/2/3+w"},
                        {{1536, 576, 12288}, "4/8/1/3+w", "4/8/1/4+w"},
                        {{896, 3584}, "3/8/2/3", "3/8/2/3"},
                        {{12288, 12288, 12288, 128, 96, 12288}, "4/8/1/3+w", "4/8/1/4+w"}};
  int checked = 0;
  for (const Case& c : cases)
    for (const bool fast : {false, true}) {
      const detail::Bf16Occupancy8 occupancy{132, fast, 2, 2, 1, 2, 2};
      const std::string got = detail::bf16_shape_name(
          detail::bf16_pick_8(c.rows.data(), static_cast<int>(c.rows.size()), occupancy));
      const std::string want = fast ? c.fast : c.slow;
      expect(got == want, "bf16 pick at 8 rows, " + rows_name(c.rows) + " rows, " +
                              (fast ? "fast" : "slow") + " DRAM: " + got + ", want " + want);
      ++checked;
    }
  std::printf("ok   bf16 shape choice at 8 rows: %d K3 launches and cards\n", checked);
}

// The rows a BF16 block takes at 8 rows on a fast card, host-side, for a 132-SM card: 28-row
// blocks where they leave the busiest SM fewer rows than 32-row ones (7168 rows: 56 against 64;
// MLA's q_a, kv_a and g_proj: 112 against 128), full blocks where they tie or win (12288, 33792),
// and the 3-row shape's 24 rows on 12288 rows. Negative forced values are refused.
void test_bf16_block_rows() {
  struct Case {
    std::vector<int64_t> rows;
    int rows_per_warp, full, want;
  };
  const Case cases[] = {{{7168}, 4, 32, 28},
                        {{12288}, 4, 32, 32},
                        {{33792}, 4, 32, 32},
                        {{1536, 576, 12288}, 4, 32, 28},
                        {{12288}, 3, 24, 24}};
  for (const Case& c : cases) {
    const int got = detail::bf16_block_rows(c.rows.data(), static_cast<int>(c.rows.size()),
                                            c.rows_per_warp, c.full, 132);
    expect(got == c.want, "bf16 block rows at 8 rows, " + rows_name(c.rows) + " rows in " +
                              std::to_string(c.full) + "-row blocks: " + std::to_string(got) +
                              ", want " + std::to_string(c.want));
  }
  const std::string m = invalid_argument_message([] { detail::set_bf16_block_rows(-1); });
  expect(m.find("-1 rows") != std::string::npos,
         "set_bf16_block_rows(-1) is refused, naming it: '" + m + "'");
  std::printf("ok   bf16 block rows at 8 rows: %zu K3 launches\n", std::size(cases));
}

// gemv.cu's BF16 shape at 16 activation rows, host-side, on a 132-SM card: 4 rows a warp in 8-warp
// blocks on K3's large spine matrices (single and as siblings), in 4-warp blocks where the 32-row
// grid's working blocks give fewer than half the SMs a block (q_a's 1536 rows: 48; 2080 rows: 65)
// or a row is shorter than a tile (f_b's 128 columns).
void test_bf16_pick_16() {
  struct Case {
    std::vector<int64_t> rows;
    int64_t cols;
    const char* want;
  };
  const Case cases[] = {{{7168}, 7168, "4/8/1/3+w"},
                        {{33792}, 7168, "4/8/1/3+w"},
                        {{3072}, 7168, "4/8/1/3+w"},
                        {{1536}, 7168, "4/4/1/3+w"},
                        {{1536, 1536, 1536}, 7168, "4/8/1/3+w"},
                        {{12288}, 128, "4/4/1/3+w"},
                        {{2112}, 7168, "4/8/1/3+w"},
                        {{2080}, 7168, "4/4/1/3+w"},
                        {{1536, 576, 12288}, 7168, "4/8/1/3+w"}};
  for (const Case& c : cases) {
    const std::string got = detail::bf16_shape_name(
        detail::bf16_pick_16(c.rows.data(), static_cast<int>(c.rows.size()), c.cols, 132));
    expect(got == c.want, "bf16 pick at 16 rows, " + rows_name(c.rows) + "x" +
                              std::to_string(c.cols) + ": " + got + ", want " + c.want);
  }
  std::printf("ok   bf16 shape choice at 16 rows: %zu cases\n", std::size(cases));
}

// with_constant, the launchers' runtime-count-to-instantiation switch (a host check): the first
// listed value equal to the count, else the last, and f called exactly once.
void test_with_constant() {
  const auto picks = [](auto pick, int v) {
    int calls = 0, got = -1;
    pick(v, [&](auto k) {
      ++calls;
      got = decltype(k)::value;
    });
    return calls == 1 ? got : -calls;
  };
  const auto batch = [](int v, auto&& f) { gemv::with_constant<1, 2, 4, 8, 16>(v, f); };
  const auto tiles = [](int v, auto&& f) { gemv::with_constant<1, 2, 3, 4, 6>(v, f); };
  const auto heads = [](int v, auto&& f) { gemv::with_constant<8, 4, 2, 1>(v, f); };
  bool ok = true;
  for (int n = 1; n <= 16; ++n) ok = ok && picks(batch, kernel_batch(n)) == kernel_batch(n);
  for (int v = 1; v <= 6; ++v) ok = ok && picks(tiles, v) == (v == 5 ? 6 : v);
  for (const int v : {8, 4, 2, 1}) ok = ok && picks(heads, v) == v;
  for (const int v : {0, 3, 16}) ok = ok && picks(heads, v) == 1;
  expect(ok, "with_constant picks the listed value, else the last, calling f once");
  std::printf("ok   with_constant\n");
}

// A pass's experts in runs of one batch size (expert_runs.h): smallest size first, the order kept
// within a size, every expert once.
void test_expert_runs() {
  std::vector<size_t> order;
  const std::vector<ExpertRun> runs = expert_runs({1, 3, 1, 16, 2, 1, 5, 9, 4}, order);
  const std::vector<size_t> want_order = {0, 2, 5, 4, 1, 8, 6, 3, 7};
  const std::vector<int64_t> want_runs = {0, 3, 1, 3, 4, 2, 4, 6, 4, 6, 7, 8, 7, 9, 16};
  std::vector<int64_t> got_runs;
  for (const ExpertRun& r : runs) got_runs.insert(got_runs.end(), {r.begin, r.end, r.max_rows});
  expect(order == want_order, "expert runs: experts ordered by batch size, stable within one");
  expect(got_runs == want_runs, "expert runs: one run per batch size, [begin, end) and size");
  const std::vector<ExpertRun> ones = expert_runs({1, 1, 1}, order);
  expect(ones.size() == 1 && ones[0].begin == 0 && ones[0].end == 3 && ones[0].max_rows == 1 &&
             order == std::vector<size_t>{0, 1, 2},
         "expert runs: one row each is a single run at batch size 1");
  expect(expert_runs({}, order).empty() && order.empty(), "expert runs: no experts, no runs");
  std::printf("ok   expert runs by batch size\n");
}

// The fixed-width MXFP4 kernel's switch (gemv_mxfp4_pairs.h): every compiled shape and the general
// kernel (0 stages) are accepted, others refused with what was asked; each width's default, on
// either card's table, is a compiled shape; the defaults are restored.
void test_mxfp4_shape_knob() {
  int accepted = 0;
  for (const int r : {2, 4})
    for (const int d : {0, 1, 2, 3}) {
      const std::string m = invalid_argument_message([&] {
        detail::set_mxfp4_pairs_shape({r, d});
      });
      expect(m.empty(), "mxfp4 shape rows " + std::to_string(r) + " d=" + std::to_string(d) +
                            " is accepted: '" + m + "'");
      accepted += m.empty();
    }
  for (const detail::Mxfp4PairsShape bad :
       {detail::Mxfp4PairsShape{3, 1}, {8, 2}, {2, 4}, {4, -1}}) {
    const std::string m = invalid_argument_message([&] { detail::set_mxfp4_pairs_shape(bad); });
    const std::string asked = std::to_string(bad.rows_per_warp) + " rows a warp step and " +
                              std::to_string(bad.stages) + " stages";
    expect(m.find(asked) != std::string::npos,
           "mxfp4 shape " + asked + " is refused, naming it: '" + m + "'");
  }
  // Both tables (an H100's DRAM rate per SM, an H200's), whichever card runs the test.
  for (const double rate : {25.4, 37.3})
    for (const int64_t cols : {3072, 3584})
      for (const bool grouped : {false, true}) {
        const detail::Mxfp4PairsShape d = detail::mxfp4_pairs_default(cols, rate, grouped);
        const std::string m = invalid_argument_message([&] { detail::set_mxfp4_pairs_shape(d); });
        expect(m.empty() && d.stages > 0, "the model's shape for " + std::to_string(cols) +
                                              " columns at " + std::to_string(rate) +
                                              " GB/s an SM" + (grouped ? " grouped" : " alone") +
                                              " is a compiled pairs shape");
      }
  detail::reset_mxfp4_pairs_shape();
  std::printf("ok   mxfp4 shape switch: %d shapes accepted, uncompiled ones refused\n", accepted);
}

void test_bad_shapes() {
  DeviceBuffer<float> buf(1024);
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf.ptr);
  const std::string m1 = invalid_argument_message([&] {
    matmul(DeviceMxfp4{bytes, bytes, 4, 48}, buf.ptr, 1, buf.ptr);
  });
  expect(m1.find("cols is 48") != std::string::npos,
         "mxfp4 cols % 32 != 0 is refused: '" + m1 + "'");
  const std::string m2 = invalid_argument_message([&] {
    matmul(DeviceBf16{reinterpret_cast<const uint16_t*>(bytes) + 1, 4, 64}, buf.ptr, 1, buf.ptr);
  });
  expect(m2.find("aligned") != std::string::npos,
         "bf16 misaligned weights are refused: '" + m2 + "'");
  const auto* tasks = reinterpret_cast<const DeviceMxfp4Task*>(buf.ptr);
  const std::string m3 = invalid_argument_message([&] { matmul_grouped(tasks, 2, 4, 48, 1); });
  expect(m3.find("4x48") != std::string::npos,
         "grouped mxfp4 cols % 32 != 0 is refused: '" + m3 + "'");
  const std::string m4 = invalid_argument_message([&] { matmul_grouped(tasks, 2, 4, 64, 17); });
  expect(m4.find("max_n is 17") != std::string::npos,
         "grouped mxfp4 max_n > 16 is refused: '" + m4 + "'");
}

}  // namespace

// decode_gpu_test.cu: the decode layer's kernels; their host-side checks run without a GPU too.
void run_decode_tests(bool gpu);
void run_layout_tests();
void run_tc_tests();
void test_tc_pick();

}  // namespace deltafin::cuda

int main() {
  using namespace deltafin::cuda;
  using testing::g_checks;
  using testing::g_failures;
  if (!testing::has_gpu()) {
    // The host-side contracts (emulations against the repository's references) still hold here.
    run_decode_tests(false);
    test_bf16_shape_knob();
    test_bf16_pick_8();
    test_bf16_pick_16();
    test_bf16_block_rows();
    test_mxfp4_shape_knob();
    test_expert_runs();
    test_with_constant();
    test_tc_pick();
    std::printf("host checks: %d, %d failed\n", g_checks, g_failures);
    if (g_failures) return 1;
    testing::require_gpu("deltafin_cuda_gpu_tests");  // exits 77
  }
  cudaDeviceProp prop{};
  testing::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  std::mt19937 rng(20261202);
  test_mxfp4(rng, 37, 1056, 16, true);    // partial tiles, rows not a multiple of the block
  test_mxfp4(rng, 300, 3584, 20, false);  // K3 latent width, n beyond one 16-row pass
  test_mxfp4(rng, 1024, 7168, 16, false);
  test_mxfp4(rng, 20, 512, 4, false);   // one tile, fewer groups than lanes
  test_mxfp4(rng, 64, 9216, 2, false);  // more than one tile at n = 1
  test_mxfp4_scaled_range(rng);
  run_layout_tests();
  test_mxfp4_grouped(rng, 37, 1056, 5, 4, false);
  test_mxfp4_grouped(rng, 300, 3584, 18, 16, false);
  test_mxfp4_grouped(rng, 100, 3072, 3, 1, false);
  for (const detail::Mxfp4PairsShape& shape : detail::mxfp4_pairs_shapes())
    for (const int64_t cols : {3584, 3072}) test_mxfp4_pairs_edges(rng, cols, shape);
  run_tc_tests();
  test_tc_pick();
  test_with_constant();
  test_bf16(rng, 45, 1000, 16);
  test_bf16(rng, 257, 7168, 19);
  test_bf16(rng, 7168, 256, 8);  // 448 blocks at n = 8: one lane chunk a tile on a 132-SM GPU
  // Balanced block rows (on a fast card, 24-row blocks at n = 5-8 here; elsewhere full blocks).
  detail::set_bf16_balanced(true);
  test_bf16(rng, 257, 7168, 9);
  detail::set_bf16_balanced(false);
  // Rows of at most 128 columns (the narrow kernel at n = 1..8): K3's f_b width with an odd row
  // count and more pairs than a grid holds, a part-filled half-warp, one chunk.
  test_bf16(rng, 9001, 128, 16);
  test_bf16(rng, 77, 40, 9);
  test_bf16(rng, 3, 8, 8);
  test_bf16_siblings(rng, {300, 5, 128, 97}, 1024, 17);
  test_bf16_shapes(rng, 45, 1000);
  test_bf16_shapes(rng, 130, 64);
  test_rmsnorm(rng, 9, 7168);
  test_rmsnorm(rng, 33, 1000);
  test_bad_shapes();
  test_bf16_shape_knob();
  test_bf16_pick_8();
  test_bf16_pick_16();
  test_bf16_block_rows();
  test_mxfp4_shape_knob();
  test_expert_runs();
  run_decode_tests(true);
  std::printf("%s: %d checks, %d failed\n", g_failures ? "FAILED" : "PASSED", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
