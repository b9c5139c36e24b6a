// Micro-benchmark of the GEMV kernels on the GPU: weight GB/s of MXFP4 and BF16 products for
// 1-16 activation rows, next to two ceilings measured in the same run: a pure-read kernel over
// the same bytes with the same launch pattern, and cudaMemcpy device-to-device (read rate).
// Weights rotate over copies totalling >= 1 GiB so every launch reads from HBM, not the L2.
//   deltafin_cuda_bench [repetitions]
// DELTAFIN_BENCH_ONLY=mxfp4,mxwide,grouped,mxtc,groupscale,mxpairs,bf16,bfshapes,bfsmall,spine,
// launches,lmhead,logits,other (any of them) runs only those entries; `spine` is K3's other BF16
// shapes, whose short and long rows decode reads most; `launches` the model's BF16 spine launches
// as it makes them (siblings together) and a layer's sum. DELTAFIN_BENCH_GRAPH=1 times the GEMV
// entries and their reads as CUDA graphs (time_launches). DELTAFIN_BENCH_N=8 (a comma list of row
// counts) keeps `bfshapes`, `mxtc` and `launches` to those activation row counts;
// DELTAFIN_BENCH_SHAPES=1 times `launches` again with every compiled BF16 shape forced.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cuda/decode_ops.h"
#include "cuda/gemv.h"
#include "cuda/gemv_knobs.h"
#include "cuda/gemv_launch.cuh"
#include "cuda/gemv_mxfp4_pairs.h"
#include "cuda/gemv_mxfp4_tc.h"
#include "cuda/gpu_test_util.h"

namespace deltafin::cuda {
namespace {

using testing::check;

constexpr size_t kRotationBytes = size_t{1} << 30;

// A rotation copy's bytes rounded up to 256, so every copy starts aligned for 16-byte loads.
constexpr size_t copy_stride(size_t bytes) { return (bytes + 255) / 256 * 256; }

// mode 0: any bits (packed nibbles); 1: bytes in 120..127 (finite E8M0 scales); 2: floats in
// [0.5, 1) (activations); 3: bf16 pairs in [0.5, 1) (weights).
__global__ void fill_kernel(uint32_t* p, size_t words, uint32_t seed, uint32_t mode) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < words;
       k += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(k) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const uint32_t modes[4] = {h, (h & 0x07070707u) | 0x78787878u, (h & 0x007fffffu) | 0x3f000000u,
                               (h & 0x007f007fu) | 0x3f003f00u};
    p[k] = modes[mode & 3u];
  }
}

__global__ void read_kernel(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = __ldcs(p + k);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads alive; practically never true
}

struct Stats {
  double min, median, max;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

void fill(void* p, size_t bytes, uint32_t seed, uint32_t mode) {
  fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed, mode);
  check(cudaGetLastError(), "fill");
}

// Where the GEMV entries and their reads launch: the legacy default stream, or with
// DELTAFIN_BENCH_GRAPH=1 a stream whose launches are captured into a CUDA graph, so that a launch
// of a few microseconds is timed by the GPU's pace and not the host's enqueue (docs/PERFORMANCE.md
// has how far the two differ on small matrices).
cudaStream_t g_stream = nullptr;
bool g_graph = false;

// GB/s (10^9 bytes) of `bytes_per_launch` for each repetition of `launches` back-to-back launches.
// `graphable`: the launches go to g_stream (a graph's under DELTAFIN_BENCH_GRAPH=1); else to the
// legacy default stream, from the host.
template <typename F>
std::vector<double> time_launches(int reps, int launches, double bytes_per_launch, F&& launch,
                                  bool graphable = false) {
  const cudaStream_t stream = graphable ? g_stream : nullptr;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (int k = 0; k < launches; ++k) launch(k);  // warm-up: attributes, instruction cache
  cudaGraphExec_t exec = nullptr;
  if (graphable && g_graph) {
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    for (int k = 0; k < launches; ++k) launch(k);
    check(cudaStreamEndCapture(stream, &graph), "capture");
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    check(cudaGraphDestroy(graph), "graph");
    check(cudaGraphLaunch(exec, stream), "graph launch");  // warm-up
  }
  std::vector<double> out;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(start, stream), "record");
    if (exec != nullptr)
      check(cudaGraphLaunch(exec, stream), "graph launch");
    else
      for (int k = 0; k < launches; ++k) launch(k);
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    out.push_back(bytes_per_launch * launches / (ms * 1e-3) / 1e9);
  }
  if (exec != nullptr) check(cudaGraphExecDestroy(exec), "graph");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return out;
}

// Whether the DELTAFIN_BENCH_ONLY list (comma-separated; unset: everything) names `key`.
bool wanted(const char* key) {
  const char* only = std::getenv("DELTAFIN_BENCH_ONLY");
  return only == nullptr || std::string(only).find(key) != std::string::npos;
}

// Whether `bfshapes`, `mxtc` and `launches` run n activation rows: the DELTAFIN_BENCH_N list
// (unset: all).
bool rows_wanted(int n) {
  const char* list = std::getenv("DELTAFIN_BENCH_N");
  if (list == nullptr) return true;
  // Appended piece by piece: g++ 12 sees a false overlap (-Werror=restrict) in "," + string.
  std::string s(1, ','), key(1, ',');
  s.append(list).push_back(',');
  key.append(std::to_string(n)).push_back(',');
  return s.find(key) != std::string::npos;
}

// The row counts of `candidates` that rows_wanted keeps, in order.
std::vector<int> wanted_rows(std::initializer_list<int> candidates) {
  std::vector<int> ns;
  for (const int n : candidates)
    if (rows_wanted(n)) ns.push_back(n);
  return ns;
}

int g_sms = 0;
uint32_t* g_sink = nullptr;
double g_copy_read_gbs = 0;

// GB/s of the read kernel over the same bytes an entry's kernels read: the ceiling of its ratios.
Stats same_bytes_read(int reps, int copies, size_t stride_bytes, size_t bytes,
                      const uint8_t* base) {
  return stats(time_launches(
      reps, copies, static_cast<double>(bytes),
      [&](int k) {
        read_kernel<<<g_sms * 8, 256, 0, g_stream>>>(
            reinterpret_cast<const uint4*>(base + k * stride_bytes), bytes / 16, g_sink);
      },
      true));
}

void print_row(const std::string& name, const Stats& s, const Stats& read) {
  std::printf("%-28s %7.0f %7.0f %7.0f   read %7.0f   %5.2f   %5.2f\n", name.c_str(), s.min,
              s.median, s.max, read.median, s.median / read.median, s.median / g_copy_read_gbs);
}

// The faster of two timings of the same read (by median).
const Stats& faster(const Stats& a, const Stats& b) { return b.median > a.median ? b : a; }

// An entry's rows, printed against its same-bytes read timed before its kernels and again after
// them, whichever is faster. A fresh allocation read ~15% slow for a while on an H100
// (tools/gpu_experiments/first_read.cu, 2026-12-07), and every entry reads bytes it has just
// allocated, so a read before the kernels alone flattered the ratios.
class RatedRows {
 public:
  explicit RatedRows(std::function<Stats()> read) : read_(std::move(read)), before_(read_()) {}
  void add(std::string name, const Stats& rate) { rows_.emplace_back(std::move(name), rate); }
  // Times the read again, prints the rows against the faster of the two and returns it.
  Stats print() {
    const Stats best = faster(before_, read_());
    for (const auto& [name, rate] : rows_) print_row(name, rate, best);
    rows_.clear();
    return best;
  }

 private:
  std::function<Stats()> read_;
  Stats before_;
  std::vector<std::pair<std::string, Stats>> rows_;
};

// tc: the tensor-core mode (gemv_mxfp4_tc.h) instead of the exact kernels.
void bench_mxfp4(int reps, int64_t rows, int64_t cols, bool tc = false) {
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

// One MoE layer's expert products in one launch (matmul_grouped): `experts` experts of
// `per_expert` [rows, cols] matrices each (gate and up: 2 sharing the expert's activations; down:
// 1), every expert with its own n activation rows, n from `ns`. The same-bytes read is one launch
// over them.
struct GroupedLaunch {
  double bytes = 0;                   // the weights and scales one launch reads
  double kernel_us = 0, read_us = 0;  // the medians of the first n's launch and of the read
};
GroupedLaunch bench_mxfp4_grouped(int reps, int experts, int per_expert, int64_t rows, int64_t cols,
                                  const std::vector<int>& ns = {1, 2, 4, 8, 16}, bool tc = false) {
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

// Least squares t = a + b · bytes over (bytes, microseconds) points: {a in us, 1 / b in GB/s}.
std::pair<double, double> fit_line(const std::vector<double>& bytes,
                                   const std::vector<double>& us) {
  const double k = static_cast<double>(bytes.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    sx += bytes[i], sy += us[i], sxx += bytes[i] * bytes[i], sxy += bytes[i] * us[i];
  }
  const double b = (k * sxy - sx * sy) / (k * sxx - sx * sx);
  return {(sy - b * sx) / k, 1e-3 / b};
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

// Random BF16 [rows, cols] matrices rotating through at least kRotationBytes (8 copies at the
// least), `rows_x` activation rows of `cols` and room for their outputs.
struct Bf16Copies {
  size_t bytes, stride;
  int copies;
  uint8_t* w = nullptr;
  float* x = nullptr;
  float* y = nullptr;
  Bf16Copies(int64_t rows, int64_t cols, int64_t rows_x)
      : bytes(rows * cols * 2),
        stride(copy_stride(bytes)),
        copies(static_cast<int>(std::max<size_t>(8, kRotationBytes / stride))) {
    check(cudaMalloc(&w, stride * copies), "malloc");
    check(cudaMalloc(&x, rows_x * cols * sizeof(float)), "malloc");
    check(cudaMalloc(&y, rows_x * rows * sizeof(float)), "malloc");
    for (int k = 0; k < copies; ++k) fill(w + k * stride, bytes, 33 + k, 3);
    fill(x, rows_x * cols * sizeof(float), 7, 2);
  }
  ~Bf16Copies() {
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  Bf16Copies(const Bf16Copies&) = delete;
  Bf16Copies& operator=(const Bf16Copies&) = delete;
  const uint16_t* matrix(int k) const { return reinterpret_cast<const uint16_t*>(w + k * stride); }
};

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
    std::vector<size_t> offset(parts);
    size_t set_bytes = 0, bytes = 0;
    for (int p = 0; p < parts; ++p) {
      offset[p] = set_bytes;
      bytes += sl.rows[p] * sl.cols * 2;
      set_bytes += copy_stride(sl.rows[p] * sl.cols * 2);
    }
    const int copies = static_cast<int>(std::max<size_t>(4, kRotationBytes / set_bytes));
    uint8_t* w = nullptr;
    float *x = nullptr, *y = nullptr;
    int64_t y_rows = 0;
    for (const int64_t r : sl.rows) y_rows += r;
    check(cudaMalloc(&w, set_bytes * copies), "malloc");
    check(cudaMalloc(&x, 16 * sl.cols * sizeof(float)), "malloc");
    check(cudaMalloc(&y, 16 * y_rows * sizeof(float)), "malloc");
    fill(w, set_bytes * copies, 41 + static_cast<uint32_t>(l), 3);
    fill(x, 16 * sl.cols * sizeof(float), 7, 2);
    RatedRows out([&] { return same_bytes_read(reps, copies, set_bytes, set_bytes, w); });
    for (const int n : ns) {
      const auto run = [&](int c) {
        DeviceBf16Out outs[kMaxBf16Siblings];
        float* yp = y;
        for (int p = 0; p < parts; ++p) {
          outs[p] = {{reinterpret_cast<const uint16_t*>(w + c * set_bytes + offset[p]), sl.rows[p],
                      sl.cols},
                     yp};
          yp += 16 * sl.rows[p];
        }
        if (parts > 1)
          matmul_siblings(outs, parts, x, n, g_stream);
        else
          matmul(outs[0].w, x, n, outs[0].y, g_stream);
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
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  for (const auto& [layer, launches] : kSpineLayers)
    for (size_t k = 0; k < ns.size(); ++k) {
      double kernel = 0, read = 0;
      for (const int l : launches) kernel += kernel_us[l][k], read += read_us[l];
      std::printf("%s spine n=%d: launches %.1f us, their reads %.1f us, ratio %.2f\n", layer,
                  ns[k], kernel, read, read / kernel);
    }
}

// The KDA decode step over K3's 96 heads: the 6.3 MB fp32 state is read and written once per call
// whatever the token count. GB/s counts the state bytes read (each is written back too), so the
// fair ceiling is the copy's read rate (the /copy column), not the pure read.
void bench_kda(int reps) {
  const int64_t nh = 96, dim = 128, width = nh * dim, max_n = 16;
  const size_t state_bytes = nh * dim * dim * sizeof(float);
  const size_t stride = copy_stride(state_bytes);
  const int copies = static_cast<int>(std::max<size_t>(8, kRotationBytes / stride));
  uint8_t* states = nullptr;
  float* act = nullptr;  // q, k, v, g, o [max_n, width] and beta [max_n, nh]
  check(cudaMalloc(&states, stride * copies), "malloc");
  check(cudaMalloc(&act, (5 * max_n * width + max_n * nh) * sizeof(float)), "malloc");
  fill(states, stride * copies, 3, 2);
  fill(act, (5 * max_n * width + max_n * nh) * sizeof(float), 9, 2);
  float *q = act, *k = q + max_n * width, *v = k + max_n * width, *g = v + max_n * width;
  float *o = g + max_n * width, *beta = o + max_n * width;
  check(cudaMemset(g, 0, max_n * width * sizeof(float)), "memset");  // decay 1
  RatedRows out([&] { return same_bytes_read(reps, copies, stride, state_bytes, states); });
  for (int n : {1, 4, 16}) {
    const auto rate = time_launches(reps, copies, static_cast<double>(state_bytes), [&](int c) {
      kda_decode(q, k, v, g, beta, n, nh, dim, reinterpret_cast<float*>(states + c * stride), o);
    });
    out.add("kda 96x128x128 n=" + std::to_string(n), stats(rate));
  }
  out.print();
  check(cudaDeviceSynchronize(), "sync");
  cudaFree(states);
  cudaFree(act);
}

// Absorbed MLA decode with K3's 96 heads over `positions` cached positions: the BF16 kv_b
// (25.2 MB) and the cache (latent + k_pe, 2.3 KB per position) are the bytes read per call.
void bench_mla(int reps, int64_t positions, const std::string& variant = "") {
  const int64_t nh = 96;
  const MlaGpuShape sh{nh};
  const size_t kvb_bytes = nh * 256 * 512 * sizeof(uint16_t);
  const size_t cache_bytes = positions * (512 + 64) * sizeof(float);
  const size_t stride = copy_stride(kvb_bytes + cache_bytes);
  const int copies = static_cast<int>(std::max<size_t>(4, kRotationBytes / stride));
  uint8_t* w = nullptr;
  float *q = nullptr, *o = nullptr, *scratch = nullptr;
  check(cudaMalloc(&w, stride * copies), "malloc");
  check(cudaMalloc(&q, nh * 192 * sizeof(float)), "malloc");
  check(cudaMalloc(&o, nh * 128 * sizeof(float)), "malloc");
  check(cudaMalloc(&scratch, mla_absorbed_gpu_scratch_floats(sh, 1, positions) * sizeof(float)),
        "malloc");
  for (int c = 0; c < copies; ++c) {
    fill(w + c * stride, kvb_bytes, 41 + c, 3);
    fill(w + c * stride + kvb_bytes, cache_bytes, 43 + c, 2);
  }
  fill(q, nh * 192 * sizeof(float), 11, 2);
  RatedRows out([&] { return same_bytes_read(reps, copies, stride, kvb_bytes + cache_bytes, w); });
  const auto rate =
      time_launches(reps, copies, static_cast<double>(kvb_bytes + cache_bytes), [&](int c) {
        const auto* kvb = reinterpret_cast<const uint16_t*>(w + c * stride);
        const auto* latent = reinterpret_cast<const float*>(w + c * stride + kvb_bytes);
        mla_absorbed(sh, kvb, latent, latent + positions * 512, positions, q, 1, scratch, o);
      });
  out.add("mla 96 heads ctx=" + std::to_string(positions) + " n=1" + variant, stats(rate));
  out.print();
  check(cudaDeviceSynchronize(), "sync");
  cudaFree(w);
  cudaFree(q);
  cudaFree(o);
  cudaFree(scratch);
}

// K3's AttnRes mix at decode: 8 blocks + the prefix of 7168 floats (258 KB), n = 1 and 16, over
// rotating copies of the sources. Small: its time per call matters more than its GB/s (it runs
// twice per layer, 186 times a token), so the line also gives microseconds per call.
void bench_attn_res(int reps) {
  const int64_t hidden = 7168, n_blocks = 8, max_n = 16;
  const size_t source_bytes = (n_blocks + 1) * max_n * hidden * sizeof(float);
  const size_t stride = copy_stride(source_bytes);
  const int copies = static_cast<int>(std::max<size_t>(8, kRotationBytes / stride));
  uint8_t* src = nullptr;
  float *key = nullptr, *out = nullptr, *scratch = nullptr;
  check(cudaMalloc(&src, stride * copies), "malloc");
  check(cudaMalloc(&key, hidden * sizeof(float)), "malloc");
  check(cudaMalloc(&out, max_n * hidden * sizeof(float)), "malloc");
  check(cudaMalloc(&scratch, attn_res_scratch_floats(max_n, hidden) * sizeof(float)), "malloc");
  fill(src, stride * copies, 21, 2);
  fill(key, hidden * sizeof(float), 23, 2);
  for (int n : {1, 16}) {
    const double bytes = static_cast<double>((n_blocks + 1) * n * hidden * sizeof(float));
    const auto rate = stats(time_launches(reps, copies, bytes, [&](int c) {
      const auto* blocks = reinterpret_cast<const float*>(src + c * stride);
      attn_res_mix(key, blocks, n_blocks, max_n * hidden, blocks + n_blocks * max_n * hidden, n,
                   hidden, 1e-5f, scratch, out);
    }));
    std::printf("%-28s %7.0f %7.0f %7.0f   GB/s of sources; %.1f us per call (median)\n",
                ("attn_res 9x7168 n=" + std::to_string(n)).c_str(), rate.min, rate.median, rate.max,
                bytes / (rate.median * 1e9) * 1e6);
  }
  check(cudaDeviceSynchronize(), "sync");
  cudaFree(src);
  cudaFree(key);
  cudaFree(out);
  cudaFree(scratch);
}

// K3's logits row (163,840 floats) from the device to the host as a decode pass ends: into
// pageable memory (a caller's plain buffer), into pinned memory (the sessions' logits,
// pinned_host.h), and pinned then copied on the host into pageable memory; each timed on the host
// from the copy's issue to the sync's return.
void bench_logits_copy(int reps) {
  constexpr size_t kFloats = 163840, kBytes = kFloats * sizeof(float);
  float *dev = nullptr, *pinned = nullptr;
  check(cudaMalloc(&dev, kBytes), "malloc");
  check(cudaMemset(dev, 1, kBytes), "memset");
  check(cudaMallocHost(&pinned, kBytes), "pinned");
  std::vector<float> pageable(kFloats);
  auto time_us = [&](auto&& body) {
    std::vector<double> us;
    for (int r = 0; r < 8 * reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      body();
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("%.1f / %.1f / %.1f us", us.front(), us[us.size() / 2], us.back());
  };
  std::printf("\nlogits row D2H (%zu bytes), min / median / max:\n  into pageable: ", kBytes);
  time_us([&] {
    check(cudaMemcpyAsync(pageable.data(), dev, kBytes, cudaMemcpyDeviceToHost, 0), "d2h");
    check(cudaStreamSynchronize(0), "sync");
  });
  std::printf("\n  into pinned: ");
  time_us([&] {
    check(cudaMemcpyAsync(pinned, dev, kBytes, cudaMemcpyDeviceToHost, 0), "d2h");
    check(cudaStreamSynchronize(0), "sync");
  });
  std::printf("\n  into pinned, then memcpy to pageable: ");
  time_us([&] {
    check(cudaMemcpyAsync(pinned, dev, kBytes, cudaMemcpyDeviceToHost, 0), "d2h");
    check(cudaStreamSynchronize(0), "sync");
    std::memcpy(pageable.data(), pinned, kBytes);
  });
  std::printf("\n");
  cudaFreeHost(pinned);
  cudaFree(dev);
}

}  // namespace
}  // namespace deltafin::cuda

int main(int argc, char** argv) {
  using namespace deltafin::cuda;
  testing::require_gpu("deltafin_cuda_bench");
  const int reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 15;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "props");
  g_sms = prop.multiProcessorCount;
  const char* graph = std::getenv("DELTAFIN_BENCH_GRAPH");
  g_graph = graph != nullptr && std::string(graph) == "1";
  if (g_graph) check(cudaStreamCreate(&g_stream), "stream");
  check(cudaMalloc(&g_sink, 4), "malloc");
  std::printf("device: %s, %d SMs, L2 %d MB; %d repetitions; GB = 1e9 bytes\n", prop.name, g_sms,
              prop.l2CacheSize >> 20, reps);
  std::printf("GEMV entries and their reads: %s\n",
              g_graph ? "each repetition's launches in one CUDA graph (DELTAFIN_BENCH_GRAPH=1)"
                      : "launched back to back from the host");
  // Which table of default shapes this card gets (gemv_launch.cuh).
  const double per_sm = gemv::device_dram_gbps_per_sm();
  std::printf("DRAM %.2f GB/s an SM: the %s shapes\n", per_sm,
              per_sm > gemv::kFastDramGbpsPerSm ? "fast-card" : "default");

  // The copy ceiling: 2 GiB device-to-device; "read" counts the bytes read (moved = 2x).
  const size_t copy_bytes = size_t{2} << 30;
  uint8_t *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, copy_bytes), "malloc");
  check(cudaMalloc(&b, copy_bytes), "malloc");
  check(cudaMemset(a, 1, copy_bytes), "memset");
  const auto copy = stats(time_launches(reps, 1, static_cast<double>(copy_bytes), [&](int) {
    check(cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice), "copy");
  }));
  const auto big_read = stats(time_launches(reps, 1, static_cast<double>(copy_bytes), [&](int) {
    read_kernel<<<g_sms * 8, 256>>>(reinterpret_cast<const uint4*>(a), copy_bytes / 16, g_sink);
  }));
  cudaFree(a);
  cudaFree(b);
  g_copy_read_gbs = copy.median;
  std::printf("memcpy D2D 2 GiB, read GB/s: %.0f / %.0f / %.0f (moved: 2x)\n", copy.min,
              copy.median, copy.max);
  std::printf("read kernel 2 GiB, GB/s:     %.0f / %.0f / %.0f\n\n", big_read.min, big_read.median,
              big_read.max);
  std::printf("%-28s %7s %7s %7s   %12s   %5s   %5s\n", "kernel (rows x cols, n)", "min", "median",
              "max", "same-bytes", "/read", "/copy");

  if (wanted("mxfp4")) {
    bench_mxfp4(reps, 3072, 3584);  // K3's gate and up
    bench_mxfp4(reps, 3584, 3072);  // K3's down
  }
  if (wanted("mxwide")) {
    bench_mxfp4(reps, 3072, 7168);
    bench_mxfp4(reps, 7168, 3072);
  }
  if (wanted("grouped")) {
    bench_mxfp4_grouped(reps, 16, 2, 3072, 3584);  // a K3 layer's 16 gates and ups
    bench_mxfp4_grouped(reps, 16, 1, 3584, 3072);  // and its 16 downs
  }
  if (wanted("mxtc")) {  // the tensor-core mode on the same matrices, each block shape
    const std::vector<int> ns = wanted_rows({1, 2, 4, 8, 16});
    for (const detail::Mxfp4TcShape& shape : detail::mxfp4_tc_shapes()) {
      std::printf("tensor-core MXFP4, shape %s:\n", detail::mxfp4_tc_shape_name(shape).c_str());
      detail::set_mxfp4_tc_shape(shape);
      if (shape.warps == 4) {  // one matrix alone: the shape its short grid gets
        bench_mxfp4(reps, 3072, 3584, true);
        bench_mxfp4(reps, 3584, 3072, true);
      }
      bench_mxfp4_grouped(reps, 16, 2, 3072, 3584, ns, true);
      bench_mxfp4_grouped(reps, 16, 1, 3584, 3072, ns, true);
    }
    detail::set_mxfp4_tc_shape({});
  }
  if (wanted("groupscale")) {
    bench_grouped_scaling(reps, 1, 3584, 3072, {4, 8, 16, 32, 64});  // downs
    bench_grouped_scaling(reps, 2, 3072, 3584, {4, 8, 16, 32});      // gates and ups
  }
  if (wanted("mxpairs")) {
    bench_mxfp4_pairs(reps, 32, 3072, 3584);  // a K3 layer's gates and ups
    bench_mxfp4_pairs(reps, 16, 3584, 3072);  // and its downs
  }
  if (wanted("bfshapes")) {
    // K3's BF16 spine shapes at a speculative pass's row counts.
    for (int n : {8, 4, 16})
      if (rows_wanted(n))
        for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{7168, 7168},
                                                                                 {12288, 7168},
                                                                                 {7168, 12288},
                                                                                 {3072, 7168},
                                                                                 {33792, 7168},
                                                                                 {7168, 33792},
                                                                                 {6144, 7168},
                                                                                 {1536, 7168},
                                                                                 {12288, 128}})
          bench_bf16_shapes(reps, n, rows, cols);
  }
  if (wanted("bfsmall")) {
    // K3's short BF16 matrices at one and two rows: MLA's q_a, f_b, a 3072-row one, and a control.
    for (int n : {1, 2})
      for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
               {1536, 7168}, {12288, 128}, {3072, 7168}, {7168, 7168}})
        bench_bf16_shapes(reps, n, rows, cols);
  }
  if (wanted("bf16")) {
    bench_bf16(reps, 7168, 7168);
    bench_bf16(reps, 3072, 7168);
  }
  if (wanted("spine")) {
    // K3's BF16 spine matrices other than the square ones above (kimi-k3.md): KDA's q/k/v/gate
    // and o, f_b's 128-column rows, the dense layer's gate/up and down, the shared experts'
    // gate/up and down, MLA's q_a.
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{12288, 7168},
                                                                             {7168, 12288},
                                                                             {12288, 128},
                                                                             {33792, 7168},
                                                                             {7168, 33792},
                                                                             {6144, 7168},
                                                                             {7168, 6144},
                                                                             {1536, 7168}})
      bench_bf16(reps, rows, cols);
  }
  if (wanted("launches")) {
    const char* shapes = std::getenv("DELTAFIN_BENCH_SHAPES");
    bench_spine_launches(reps, wanted_rows({1, 8, 16}),
                         shapes != nullptr && std::string(shapes) == "1");
  }
  if (wanted("lmhead")) bench_bf16(reps, 163840, 7168);
  if (wanted("logits")) bench_logits_copy(reps);
  if (wanted("other")) {
    bench_attn_res(reps);
    bench_kda(reps);
    bench_mla(reps, 1024);
    bench_mla(reps, 8192);
    bench_mla(reps, 32768);
  }
  if (wanted("mla32k")) bench_mla(reps, 32768);  // alone, for a profile of its kernels
  if (wanted("mlamix")) {
    // The weighted sum's heads a block, each forced, at 1K, 8K and 32K positions.
    for (const int64_t positions : {1024, 8192, 32768})
      for (const int heads : {1, 2, 4, 8}) {
        detail::set_mla_mix_heads(heads);
        bench_mla(reps, positions, " mix " + std::to_string(heads));
      }
    detail::set_mla_mix_heads(0);
  }
  check(cudaDeviceSynchronize(), "sync");
  return 0;
}
