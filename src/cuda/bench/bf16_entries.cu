// The benchmark's BF16 entries: every compiled kernel shape of a matrix (bench_bf16_shapes), the
// default choice at 1-16 rows (bench_bf16), and the GPU model's spine launches as it makes them
// with a layer's sum (bench_spine_launches).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cuda/bench/entries.h"
#include "cuda/bench/harness.h"
#include "cuda/gemv.h"
#include "cuda/gemv_knobs.h"

namespace deltafin::cuda::bench {
namespace {

// Sets of random BF16 matrices of rows[p] x cols (each set one launch's matrices, each 256-byte
// aligned), the sets rotating through at least kRotationBytes (min_copies sets at the least),
// `rows_x` activation rows of `cols` and room for every matrix's outputs for them. Set k is filled
// with seed `seed` + k.
struct Bf16Copies {
  std::vector<size_t> offset;  // of matrix p in a set
  size_t bytes = 0;            // a set's weights
  size_t stride = 0;           // a set's bytes with each matrix's alignment
  int copies;
  uint8_t* w = nullptr;
  float* x = nullptr;
  float* y = nullptr;
  Bf16Copies(const std::vector<int64_t>& rows, int64_t cols, int64_t rows_x, int min_copies,
             uint32_t seed) {
    int64_t y_rows = 0;
    for (const int64_t r : rows) {
      offset.push_back(stride);
      bytes += r * cols * 2;
      stride += copy_stride(r * cols * 2);
      y_rows += r;
    }
    copies = static_cast<int>(std::max<size_t>(min_copies, kRotationBytes / stride));
    check(cudaMalloc(&w, stride * copies), "malloc");
    check(cudaMalloc(&x, rows_x * cols * sizeof(float)), "malloc");
    check(cudaMalloc(&y, rows_x * y_rows * sizeof(float)), "malloc");
    for (int k = 0; k < copies; ++k) fill(w + k * stride, stride, seed + k, 3);
    fill(x, rows_x * cols * sizeof(float), 7, 2);
  }
  // One [rows, cols] matrix, 8 copies at the least (the shape entries).
  Bf16Copies(int64_t rows, int64_t cols, int64_t rows_x)
      : Bf16Copies(std::vector<int64_t>{rows}, cols, rows_x, 8, 33) {}
  ~Bf16Copies() {
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  Bf16Copies(const Bf16Copies&) = delete;
  Bf16Copies& operator=(const Bf16Copies&) = delete;
  // Matrix p of set k.
  const uint16_t* matrix(int k, int p = 0) const {
    return reinterpret_cast<const uint16_t*>(w + k * stride + offset[p]);
  }
};

}  // namespace

// Every BF16 kernel shape compiled for n activation rows (detail::bf16_shapes): outputs memcmp'd
// against the first shape's ("DIFF" where they differ), then GB/s with the shapes interleaved over
// 3 rounds of `reps`. A row is named R/W/U/S: weight rows a warp, warps a block, chunks a lane,
// ring buffers.
void bench_bf16_shapes(int reps, int n, int64_t rows, int64_t cols) {
  const Bf16Copies m(rows, cols, n);
  const size_t bytes = m.bytes;
  float* const y = m.y;
  RatedRows out([&] { return same_bytes_read(reps, m.copies, m.stride, bytes, m.w); });
  auto run = [&](int k) { matmul(DeviceBf16{m.matrix(k), rows, cols}, m.x, n, y, g_stream); };
  const std::vector<detail::Bf16Shape> shapes = detail::bf16_shapes(n);
  const size_t count = shapes.size();
  std::vector<float> want, got(n * rows);
  std::vector<bool> same(count);
  for (size_t v = 0; v < count; ++v) {
    detail::set_bf16_shape(n, shapes[v]);
    check(cudaMemset(y, 0, n * rows * sizeof(float)), "memset");
    run(0);
    check(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost), "d2h");
    if (v == 0) want = got;
    const bool written = std::any_of(want.begin(), want.end(), [](float f) { return f != 0; });
    same[v] = written && std::memcmp(want.data(), got.data(), got.size() * 4) == 0;
  }
  std::vector<std::vector<double>> rate(count);
  for (int round = 0; round < 3; ++round)
    for (size_t v = 0; v < count; ++v) {
      detail::set_bf16_shape(n, shapes[v]);
      const auto r = time_launches(reps, m.copies, static_cast<double>(bytes), run, true);
      rate[v].insert(rate[v].end(), r.begin(), r.end());
    }
  detail::set_bf16_shape(n, {});
  for (size_t v = 0; v < count; ++v)
    out.add("bf16 " + std::to_string(rows) + "x" + std::to_string(cols) +
                " n=" + std::to_string(n) + " " + detail::bf16_shape_name(shapes[v]) +
                (same[v] ? "" : " DIFF"),
            stats(rate[v]));
  out.print();
  check(cudaDeviceSynchronize(), "sync");
}

void bench_bf16(int reps, int64_t rows, int64_t cols) {
  const Bf16Copies m(rows, cols, 16);
  RatedRows out([&] { return same_bytes_read(reps, m.copies, m.stride, m.bytes, m.w); });
  for (int n : {1, 4, 8, 16}) {
    const auto v = time_launches(
        reps, m.copies, static_cast<double>(m.bytes),
        [&](int k) {
          matmul(DeviceBf16{m.matrix(k), rows, cols}, m.x, n, m.y, g_stream);
        },
        true);
    out.add("bf16 " + std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n),
            stats(v));
  }
  out.print();
  check(cudaDeviceSynchronize(), "sync");
}

namespace {

// One of the GPU model's BF16 spine launches (gpu_blocks.cc): the matrices of one matmul_siblings
// launch (one x, rows each), or one matrix alone; all of `cols` columns.
struct SpineLaunch {
  const char* name;
  std::vector<int64_t> rows;
  int64_t cols;
};

// K3's (kimi-k3.md) BF16 spine launches of a layer as the GPU model makes them at decode and
// verify: the per-shape entries above time matrices the model never launches alone (q_a, the
// 3072-row one), and these are what a pass waits for. kv_b is read inside the MLA kernels.
const SpineLaunch kSpineLaunches[] = {
    {"kda q,k,v,f_a,b,g", {12288, 12288, 12288, 128, 96, 12288}, 7168},
    {"kda f_b", {12288}, 128},
    {"o_proj", {7168}, 12288},
    {"mla q_a,kv_a,g", {1536, 576, 12288}, 7168},
    {"mla q_b", {18432}, 1536},
    {"moe router,latent_down", {896, 3584}, 7168},
    {"moe latent_up", {7168}, 3584},
    {"shared gate,up", {6144, 6144}, 7168},
    {"shared down", {7168}, 6144},
};
// The launches (indices above) of a KDA+MoE layer (69 of K3's 93) and an MLA+MoE layer (23).
const std::pair<const char*, std::vector<int>> kSpineLayers[] = {
    {"KDA+MoE layer", {0, 1, 2, 5, 6, 7, 8}}, {"MLA+MoE layer", {3, 4, 2, 5, 6, 7, 8}}};

}  // namespace

// Each spine launch at each n of `ns` against a read of its bytes (sets of its matrices rotating
// through >= 1 GiB), then per layer kind the launches' summed time against the reads' (the
// spine's share of a pass at the read rate). all_shapes: each launch again with every compiled
// BF16 shape forced (the layer lines keep the default choice's times).
void bench_spine_launches(int reps, const std::vector<int>& ns, bool all_shapes) {
  const size_t count = std::size(kSpineLaunches);
  // Per launch: the kernel's median microseconds at each n, and its read's.
  std::vector<std::vector<double>> kernel_us(count);
  std::vector<double> read_us(count);
  for (size_t l = 0; l < count; ++l) {
    const SpineLaunch& sl = kSpineLaunches[l];
    const int parts = static_cast<int>(sl.rows.size());
    const Bf16Copies m(sl.rows, sl.cols, 16, 4, 41 + static_cast<uint32_t>(l));
    const size_t bytes = m.bytes, set_bytes = m.stride;
    const int copies = m.copies;
    RatedRows out([&] { return same_bytes_read(reps, copies, set_bytes, set_bytes, m.w); });
    for (const int n : ns) {
      const auto run = [&](int c) {
        DeviceBf16Out outs[kMaxBf16Siblings];
        float* yp = m.y;
        for (int p = 0; p < parts; ++p) {
          outs[p] = {{m.matrix(c, p), sl.rows[p], sl.cols}, yp};
          yp += 16 * sl.rows[p];
        }
        if (parts > 1)
          matmul_siblings(outs, parts, m.x, n, g_stream);
        else
          matmul(outs[0].w, m.x, n, outs[0].y, g_stream);
      };
      const Stats rate = stats(time_launches(reps, copies, static_cast<double>(bytes), run, true));
      out.add(std::string(sl.name) + " n=" + std::to_string(n), rate);
      kernel_us[l].push_back(static_cast<double>(bytes) / rate.median * 1e-3);
      if (all_shapes) {
        for (const detail::Bf16Shape& shape : detail::bf16_shapes(n)) {
          detail::set_bf16_shape(n, shape);
          out.add(std::string(sl.name) + " n=" + std::to_string(n) + " " +
                      detail::bf16_shape_name(shape),
                  stats(time_launches(reps, copies, static_cast<double>(bytes), run, true)));
        }
        detail::set_bf16_shape(n, {});
      }
    }
    read_us[l] = static_cast<double>(bytes) / out.print().median * 1e-3;
    check(cudaDeviceSynchronize(), "sync");
  }
  for (const auto& [layer, launches] : kSpineLayers)
    for (size_t k = 0; k < ns.size(); ++k) {
      double kernel = 0, read = 0;
      for (const int l : launches) kernel += kernel_us[l][k], read += read_us[l];
      std::printf("%s spine n=%d: launches %.1f us, their reads %.1f us, ratio %.2f\n", layer,
                  ns[k], kernel, read, read / kernel);
    }
}

}  // namespace deltafin::cuda::bench
