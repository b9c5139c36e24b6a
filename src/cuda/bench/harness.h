// The benchmark's shared harness: rotation sizes, random fills, timing of launches (as CUDA
// graphs under DELTAFIN_BENCH_GRAPH=1), the entry and row-count filters, and the rated rows every
// entry prints against its same-bytes read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cuda/gpu_test_util.h"

namespace deltafin::cuda::bench {

using testing::check;

constexpr size_t kRotationBytes = size_t{1} << 30;

// A rotation copy's bytes rounded up to 256, so every copy starts aligned for 16-byte loads.
constexpr size_t copy_stride(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Fills `bytes` at p with random words of `mode` (the modes: fill_kernel in harness.cu).
void fill(void* p, size_t bytes, uint32_t seed, uint32_t mode);

// Reads n uint4 at p (streaming loads) and keeps them alive through `sink`: the same-bytes read
// and the 2 GiB read ceiling.
__global__ void read_kernel(const uint4* p, size_t n, uint32_t* sink);

struct Stats {
  double min, median, max;
};

// The min, median and max of v.
Stats stats(std::vector<double> v);

// Where the GEMV entries and their reads launch: the legacy default stream, or with
// DELTAFIN_BENCH_GRAPH=1 a stream whose launches are captured into a CUDA graph, so that a launch
// of a few microseconds is timed by the GPU's pace and not the host's enqueue (docs/PERFORMANCE.md
// has how far the two differ on small matrices).
extern cudaStream_t g_stream;
extern bool g_graph;

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

// Whether the environment variable `name` is "1" (the bench's on/off switches).
bool switch_on(const char* name);

// Whether the DELTAFIN_BENCH_ONLY list (comma-separated; unset: everything) names `key`.
bool wanted(const char* key);

// Whether `bfshapes`, `mxtc` and `launches` run n activation rows: the DELTAFIN_BENCH_N list
// (unset: all).
bool rows_wanted(int n);

// The row counts of `candidates` that rows_wanted keeps, in order.
std::vector<int> wanted_rows(std::initializer_list<int> candidates);

// The device's SM count, the read kernel's sink, and the memcpy ceiling's read GB/s (the /copy
// column), all set by main.
extern int g_sms;
extern uint32_t* g_sink;
extern double g_copy_read_gbs;

// GB/s of the read kernel over the same bytes an entry's kernels read: the ceiling of its ratios.
Stats same_bytes_read(int reps, int copies, size_t stride_bytes, size_t bytes, const uint8_t* base);

// One line of an entry: its rate's min / median / max, then the read's median and the ratios of
// the rate's median to the read's and to the copy's.
void print_row(const std::string& name, const Stats& s, const Stats& read);

// The faster of two timings of the same read (by median).
const Stats& faster(const Stats& a, const Stats& b);

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

// Least squares t = a + b · bytes over (bytes, microseconds) points: {a in us, 1 / b in GB/s}.
std::pair<double, double> fit_line(const std::vector<double>& bytes, const std::vector<double>& us);

}  // namespace deltafin::cuda::bench
