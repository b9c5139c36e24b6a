// The benchmark's MXFP4 entries: the exact kernels and the tensor-core mode one matrix at a time
// (bench_mxfp4) and grouped (bench_mxfp4_grouped), the grouped launch's cost against its size
// (bench_grouped_scaling), and the fixed-width kernel's shapes (bench_mxfp4_pairs).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda/bench/entries.h"
#include "cuda/bench/harness.h"
#include "cuda/gemv.h"
#include "cuda/gemv_mxfp4_pairs.h"
#include "cuda/gemv_mxfp4_tc.h"

namespace deltafin::cuda::bench {

// tc: the tensor-core mode (gemv_mxfp4_tc.h) instead of the exact kernels.
void bench_mxfp4(int reps, int64_t rows, int64_t cols, bool tc) {
  const size_t packed = rows * cols / 2, scales = rows * cols / 32;
  const size_t stride = copy_stride(packed + scales);
  const int copies = static_cast<int>(std::max<size_t>(8, kRotationBytes / stride));
  uint8_t* w = nullptr;
  float *x = nullptr, *y = nullptr;
  check(cudaMalloc(&w, stride * copies), "malloc");
  check(cudaMalloc(&x, 16 * cols * sizeof(float)), "malloc");
  check(cudaMalloc(&y, 16 * rows * sizeof(float)), "malloc");
  for (int k = 0; k < copies; ++k) {
    fill(w + k * stride, packed, 17 + k, 0);
    fill(w + k * stride + packed, scales, 91 + k, 1);
  }
  fill(x, 16 * cols * sizeof(float), 5, 2);
  RatedRows out([&] { return same_bytes_read(reps, copies, stride, packed + scales, w); });
  for (int n : {1, 2, 4, 8, 16}) {
    const auto v = time_launches(
        reps, copies, static_cast<double>(packed + scales),
        [&](int k) {
          const DeviceMxfp4 m{w + k * stride, w + k * stride + packed, rows, cols};
          if (tc)
            matmul_tc(m, x, n, y, g_stream);
          else
            matmul(m, x, n, y, g_stream);
        },
        true);
    out.add(std::string(tc ? "tc " : "") + "mxfp4 " + std::to_string(rows) + "x" +
                std::to_string(cols) + " n=" + std::to_string(n),
            stats(v));
  }
  out.print();
  check(cudaDeviceSynchronize(), "sync");
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
}

namespace {

// `copies` sets of `count` random MXFP4 [rows, cols] matrices (packed nibbles, then finite E8M0
// scales, 256-byte aligned) filling at least kRotationBytes, so the sets rotate out of the L2.
struct Mxfp4Sets {
  size_t packed, scales, stride, set_bytes;
  int count, copies;
  uint8_t* w = nullptr;
  Mxfp4Sets(int count_, int64_t rows, int64_t cols)
      : packed(rows * cols / 2),
        scales(rows * cols / 32),
        stride(copy_stride(packed + scales)),
        set_bytes(stride * count_),
        count(count_),
        copies(static_cast<int>(std::max<size_t>(4, kRotationBytes / set_bytes))) {
    check(cudaMalloc(&w, set_bytes * copies), "malloc");
    for (int k = 0; k < copies * count; ++k) {
      fill(w + k * stride, packed, 17 + k, 0);
      fill(w + k * stride + packed, scales, 91 + k, 1);
    }
  }
  ~Mxfp4Sets() { cudaFree(w); }
  Mxfp4Sets(const Mxfp4Sets&) = delete;
  Mxfp4Sets& operator=(const Mxfp4Sets&) = delete;
  const uint8_t* matrix(int k) const { return w + static_cast<size_t>(k) * stride; }
};

}  // namespace

// One MoE layer's expert products in one launch (matmul_grouped): `experts` experts of
// `per_expert` [rows, cols] matrices each (gate and up: 2 sharing the expert's activations; down:
// 1), every expert with its own n activation rows, n from `ns`. The same-bytes read is one launch
// over them.
GroupedLaunch bench_mxfp4_grouped(int reps, int experts, int per_expert, int64_t rows, int64_t cols,
                                  const std::vector<int>& ns, bool tc) {
  const int count = experts * per_expert;
  const Mxfp4Sets sets(count, rows, cols);
  const size_t packed = sets.packed, scales = sets.scales;
  const int copies = sets.copies;
  const int variants = static_cast<int>(ns.size());
  float *x = nullptr, *y = nullptr;
  DeviceMxfp4Task* tasks = nullptr;
  check(cudaMalloc(&x, experts * 16 * cols * sizeof(float)), "malloc");
  check(cudaMalloc(&y, count * 16 * rows * sizeof(float)), "malloc");
  check(cudaMalloc(&tasks, copies * variants * count * sizeof(DeviceMxfp4Task)), "malloc");
  fill(x, experts * 16 * cols * sizeof(float), 5, 2);
  std::vector<DeviceMxfp4Task> host;
  for (int n : ns)
    for (int c = 0; c < copies; ++c)
      for (int t = 0; t < count; ++t) {
        const uint8_t* m = sets.matrix(c * count + t);
        host.push_back({m, m + packed, x + (t / per_expert) * 16 * cols, y + t * 16 * rows, n});
      }
  check(
      cudaMemcpy(tasks, host.data(), host.size() * sizeof(DeviceMxfp4Task), cudaMemcpyHostToDevice),
      "upload");
  RatedRows out(
      [&] { return same_bytes_read(reps, copies, sets.set_bytes, sets.set_bytes, sets.w); });
  const double bytes = static_cast<double>((packed + scales) * count);
  GroupedLaunch first{bytes, 0, 0};
  for (int v = 0; v < variants; ++v) {
    const int n = ns[v];
    const Stats rate = stats(time_launches(
        reps, copies, bytes,
        [&](int c) {
          const DeviceMxfp4Task* t = tasks + (v * copies + c) * count;
          if (tc)
            matmul_grouped_tc(t, count, rows, cols, n, g_stream);
          else
            matmul_grouped(t, count, rows, cols, n, g_stream);
        },
        true));
    out.add(std::string(tc ? "tc " : "") + "grouped " + std::to_string(count) + "x" +
                std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n),
            rate);
    if (v == 0) first.kernel_us = bytes / rate.median * 1e-3;
  }
  first.read_us = static_cast<double>(sets.set_bytes) / out.print().median * 1e-3;
  check(cudaDeviceSynchronize(), "sync");
  cudaFree(x);
  cudaFree(y);
  cudaFree(tasks);
  return first;
}

// One launch's MXFP4 expert products at n = 1 (matmul_grouped) for several expert counts, each
// against the same-bytes read, then a line t = a + bytes / rate fitted to each: what a launch
// costs whatever its size, and the rate once it runs. The bar's ratio (kernel over read at one
// K3 layer's count) mixes the two.
void bench_grouped_scaling(int reps, int per_expert, int64_t rows, int64_t cols,
                           const std::vector<int>& experts) {
  std::vector<double> bytes, kernel_us, read_us;
  for (const int e : experts) {
    const GroupedLaunch g = bench_mxfp4_grouped(reps, e, per_expert, rows, cols, {1});
    bytes.push_back(g.bytes);
    kernel_us.push_back(g.kernel_us);
    read_us.push_back(g.read_us);
    std::printf("  %3d x %lldx%lld: %.1f MB, kernel %.2f us, read %.2f us\n", e * per_expert,
                static_cast<long long>(rows), static_cast<long long>(cols), g.bytes / 1e6,
                g.kernel_us, g.read_us);
  }
  const auto [ka, kr] = fit_line(bytes, kernel_us);
  const auto [ra, rr] = fit_line(bytes, read_us);
  std::printf(
      "  fit t = a + bytes / rate: kernel a %.2f us, rate %.0f GB/s; read a %.2f us, rate "
      "%.0f GB/s; rates %.2f\n",
      ka, kr, ra, rr, kr / rr);
}

// The fixed-width MXFP4 kernel (gemv_mxfp4_pairs.cu) at n = 1 in each compiled shape (rows a warp
// step, ring depth) against the general kernel, on `count` [rows, cols] matrices as one grouped
// launch and one at a time: the outputs memcmp'd to the general kernel's ("DIFF" where they
// differ), then GB/s with the variants interleaved over 3 rounds of `reps`, the grouped rows
// against the set's read and then the single rows against one matrix's.
void bench_mxfp4_pairs(int reps, int count, int64_t rows, int64_t cols) {
  const Mxfp4Sets sets(count, rows, cols);
  const size_t packed = sets.packed, scales = sets.scales, set_bytes = sets.set_bytes;
  const int copies = sets.copies;
  float *x = nullptr, *y = nullptr;
  DeviceMxfp4Task* tasks = nullptr;
  check(cudaMalloc(&x, cols * sizeof(float)), "malloc");
  check(cudaMalloc(&y, count * rows * sizeof(float)), "malloc");
  check(cudaMalloc(&tasks, copies * count * sizeof(DeviceMxfp4Task)), "malloc");
  fill(x, cols * sizeof(float), 5, 2);
  std::vector<DeviceMxfp4Task> host;
  for (int k = 0; k < copies * count; ++k)
    host.push_back({sets.matrix(k), sets.matrix(k) + packed, x, y + (k % count) * rows, 1});
  check(
      cudaMemcpy(tasks, host.data(), host.size() * sizeof(DeviceMxfp4Task), cudaMemcpyHostToDevice),
      "upload");
  const auto time_set = [&] { return same_bytes_read(reps, copies, set_bytes, set_bytes, sets.w); };
  const auto time_one = [&] {
    return same_bytes_read(reps, copies * count, sets.stride, packed + scales, sets.w);
  };
  RatedRows set_rows(time_set), one_rows(time_one);
  // The general kernel (0 stages), then every compiled shape.
  std::vector<detail::Mxfp4PairsShape> shapes = {{2, 0}};
  for (const detail::Mxfp4PairsShape& s : detail::mxfp4_pairs_shapes()) shapes.push_back(s);
  const int n_shapes = static_cast<int>(shapes.size());
  auto grouped = [&](int c) { matmul_grouped(tasks + c * count, count, rows, cols, 1, g_stream); };
  auto single = [&](int k) {
    matmul(DeviceMxfp4{sets.matrix(k), sets.matrix(k) + packed, rows, cols}, x, 1, y, g_stream);
  };
  // Same bits as the general kernel, grouped (every task) and single (the first matrix).
  std::vector<float> want_g, want_s;
  std::vector<bool> same(n_shapes);
  for (int d = 0; d < n_shapes; ++d) {
    detail::set_mxfp4_pairs_shape(shapes[d]);
    std::vector<float> got_g(count * rows), got_s(rows);
    check(cudaMemset(y, 0, count * rows * sizeof(float)), "memset");
    grouped(0);
    check(cudaMemcpy(got_g.data(), y, got_g.size() * 4, cudaMemcpyDeviceToHost), "d2h");
    check(cudaMemset(y, 0, count * rows * sizeof(float)), "memset");
    single(0);
    check(cudaMemcpy(got_s.data(), y, got_s.size() * 4, cudaMemcpyDeviceToHost), "d2h");
    if (d == 0) want_g = got_g, want_s = got_s;
    const bool written = std::any_of(want_g.begin(), want_g.end(), [](float v) { return v != 0; });
    same[d] = written && std::memcmp(want_g.data(), got_g.data(), got_g.size() * 4) == 0 &&
              std::memcmp(want_s.data(), got_s.data(), got_s.size() * 4) == 0;
  }
  std::vector<std::vector<double>> rate_g(n_shapes), rate_s(n_shapes);
  for (int round = 0; round < 3; ++round)
    for (int d = 0; d < n_shapes; ++d) {
      detail::set_mxfp4_pairs_shape(shapes[d]);
      const auto g = time_launches(reps, copies, static_cast<double>(set_bytes), grouped, true);
      const auto s1 =
          time_launches(reps, copies * count, static_cast<double>(packed + scales), single, true);
      rate_g[d].insert(rate_g[d].end(), g.begin(), g.end());
      rate_s[d].insert(rate_s[d].end(), s1.begin(), s1.end());
    }
  detail::reset_mxfp4_pairs_shape();
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  for (int d = 0; d < n_shapes; ++d) {
    const std::string tag = (d == 0 ? std::string("general")
                                    : "rows " + std::to_string(shapes[d].rows_per_warp) +
                                          " d=" + std::to_string(shapes[d].stages)) +
                            (same[d] ? "" : " DIFF");
    set_rows.add("grp " + std::to_string(count) + "x" + shape + " " + tag, stats(rate_g[d]));
    one_rows.add("one " + shape + " " + tag, stats(rate_s[d]));
  }
  set_rows.print();
  one_rows.print();
  check(cudaDeviceSynchronize(), "sync");
  cudaFree(x);
  cudaFree(y);
  cudaFree(tasks);
}

}  // namespace deltafin::cuda::bench
