// Decode GEMV bandwidth with the weights cold in DRAM: one K3 expert's MXFP4 matrices and a K3
// spine BF16 projection, against copy and read bandwidth measured in the same iterations on the
// same buffers. Every iteration runs the kernel on one copy of the weights, memcpy on another and a
// plain read on a third; copies rotate through a 1 GiB huge-page arena (the L3 is 300 MiB), so
// every pass streams from DRAM.
//
// Counters (GB = 1e9 bytes): weight_GBps = weight bytes (packed + scales, or bf16) / kernel time;
// copy_GBps = bytes read by memcpy / its time (it also writes as many bytes, so the memory system
// moves twice this); read_GBps = bytes summed by a vector read loop / its time; ratio_copy and
// ratio_read = weight_GBps over those; kernel_cpu_us = the calling thread's CPU time per kernel
// call (with one thread, the kernel's time without the preemption of a shared host). Threads: the
// last argument (a pool of that many threads for the kernel and both references).
// DELTAFIN_ISA=avx2|ref benchmarks the other variants. Also, hot in cache: the element-wise
// kernels, one KDA head's delta rule, the short convolution, the AttnRes mix and a decode token's
// MLA attention.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/stopwatch.h"
#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/attn_res.h"
#include "kernels/elementwise.h"
#include "kernels/kda.h"
#include "kernels/matmul.h"
#include "kernels/mla_attention.h"
#include "kernels/short_conv.h"

namespace deltafin {
namespace {

constexpr size_t kArenaBytes = size_t{1} << 30;
constexpr size_t kAlign = size_t{2} << 20;

// One 1 GiB arena shared by all benchmarks, filled per benchmark with data of the right kind.
uint8_t* arena() {
  static uint8_t* p = [] {
    auto* a = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kArenaBytes));
    DF_ASSERT(a != nullptr);
    madvise(a, kArenaBytes, MADV_HUGEPAGE);
    return a;
  }();
  return p;
}

// Copies of one weight tensor laid out back to back (4 KiB aligned) through the arena.
struct Copies {
  size_t stride = 0, count = 0;
  uint8_t* at(size_t i) const { return arena() + (i % count) * stride; }
};

Copies layout(size_t bytes) {
  Copies c;
  c.stride = (bytes + 4095) / 4096 * 4096;
  c.count = kArenaBytes / c.stride;
  DF_ASSERT(c.count >= 4);
  return c;
}

// Reads every byte (vector loads, 4 accumulators) so the compiler cannot drop the loads. This file
// gets no ISA flags, hence the target attribute; read_all falls back to 64-bit loads without
// AVX-512.
__attribute__((target("avx512f"))) float read_all_avx512(const uint8_t* p, size_t bytes) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    // The same software prefetch as the kernels, so that this ceiling is not the easier target.
    for (int k = 0; k < 4; ++k)
      _mm_prefetch(reinterpret_cast<const char*>(p + i) + 4096 + 64 * k, _MM_HINT_T0);
    a0 = _mm512_add_ps(a0, _mm512_castsi512_ps(_mm512_loadu_si512(p + i)));
    a1 = _mm512_add_ps(a1, _mm512_castsi512_ps(_mm512_loadu_si512(p + i + 64)));
    a2 = _mm512_add_ps(a2, _mm512_castsi512_ps(_mm512_loadu_si512(p + i + 128)));
    a3 = _mm512_add_ps(a3, _mm512_castsi512_ps(_mm512_loadu_si512(p + i + 192)));
  }
  float tail = 0.0f;
  for (; i < bytes; ++i) tail += p[i];
  float lanes[16];
  _mm512_storeu_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  for (float v : lanes) tail += v;
  return tail;
}

float read_all(const uint8_t* p, size_t bytes) {
  if (base::cpu_features().avx512) return read_all_avx512(p, bytes);
  uint64_t acc = 0;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    acc ^= v;
  }
  return static_cast<float>(acc);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Runs `kernel(weights)` per iteration against memcpy and a read of other cold copies, and sets
// the counters described at the top of the file. `bytes` = weight bytes per call.
template <typename Kernel>
void measure(benchmark::State& state, base::ThreadPool& pool, const Copies& copies, size_t bytes,
             Kernel kernel) {
  std::vector<uint8_t> dst(bytes);
  std::vector<float> sums(pool.size());
  const size_t chunk_grain = 64 << 10;
  double kernel_s = 0.0, copy_s = 0.0, read_s = 0.0, kernel_cpu_s = 0.0;
  size_t next = 0;
  for (auto _ : state) {
    const double cpu0 = thread_cpu_seconds();
    base::Stopwatch lap;
    kernel(copies.at(next));
    const double k = lap.lap_seconds();
    kernel_cpu_s += thread_cpu_seconds() - cpu0;
    const uint8_t* src = copies.at(next + copies.count / 3);
    pool.parallel_for(bytes, chunk_grain,
                      [&](size_t b, size_t e) { std::memcpy(dst.data() + b, src + b, e - b); });
    copy_s += lap.lap_seconds();
    const uint8_t* rd = copies.at(next + 2 * copies.count / 3);
    pool.parallel_for(bytes, chunk_grain, [&](size_t b, size_t e) {
      sums[b * pool.size() / bytes] += read_all(rd + b, e - b);
    });
    read_s += lap.lap_seconds();
    benchmark::DoNotOptimize(sums.data());
    benchmark::ClobberMemory();
    kernel_s += k;
    state.SetIterationTime(k);
    ++next;
  }
  const double total_gb = static_cast<double>(bytes) * state.iterations() / 1e9;
  state.counters["weight_GBps"] = total_gb / kernel_s;
  state.counters["copy_GBps"] = total_gb / copy_s;
  state.counters["read_GBps"] = total_gb / read_s;
  state.counters["ratio_copy"] = copy_s / kernel_s;
  state.counters["ratio_read"] = read_s / kernel_s;
  // The calling thread's CPU time in the kernel: with one thread (the pool runs inline) this is the
  // kernel's time without the preemption a shared host adds to the wall time.
  state.counters["kernel_cpu_us"] = kernel_cpu_s * 1e6 / static_cast<double>(state.iterations());
}

// Fast fill (xorshift64): the arena is 1 GiB.
struct Xorshift {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  uint64_t operator()() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

std::vector<float> random_x(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

// MXFP4 [rows, cols] as stored in K3: packed bytes followed by the scales. Args: rows, cols,
// batch, threads.
void BM_Mxfp4Matmul(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  base::ThreadPool pool(static_cast<int>(state.range(3)));
  const size_t packed_bytes = rows * cols / 2, bytes = packed_bytes + rows * cols / 32;
  const Copies copies = layout(bytes);
  Xorshift rng;
  for (size_t i = 0; i < copies.count; ++i) {
    uint8_t* p = copies.at(i);
    for (size_t b = 0; b + 8 <= packed_bytes; b += 8) {
      const uint64_t v = rng();
      std::memcpy(p + b, &v, 8);
    }
    for (size_t b = packed_bytes; b < bytes; ++b) p[b] = static_cast<uint8_t>(118 + rng() % 12);
  }
  const std::vector<float> x = random_x(n * cols);
  std::vector<float> y(n * rows);
  measure(state, pool, copies, bytes, [&](const uint8_t* w) {
    kernels::matmul(kernels::Mxfp4Matrix{w, w + packed_bytes, rows, cols}, x.data(), n, y.data(),
                    pool);
  });
}

// BF16 [rows, cols]. Args: rows, cols, batch, threads.
void BM_Bf16Matmul(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  base::ThreadPool pool(static_cast<int>(state.range(3)));
  const size_t bytes = rows * cols * 2;
  const Copies copies = layout(bytes);
  // Normal bf16 values around 0.02 (no subnormals, as in real weights).
  Xorshift rng;
  for (size_t i = 0; i < copies.count; ++i) {
    auto* p = reinterpret_cast<uint16_t*>(copies.at(i));
    for (size_t e = 0; e + 4 <= bytes / 2; e += 4) {
      const uint64_t v = rng();
      for (int k = 0; k < 4; ++k)
        p[e + k] = static_cast<uint16_t>(0x3c00 + ((v >> (16 * k)) & 0x87ff));
    }
  }
  const std::vector<float> x = random_x(n * cols);
  std::vector<float> y(n * rows);
  measure(state, pool, copies, bytes, [&](const uint8_t* w) {
    kernels::matmul(kernels::Bf16Matrix{reinterpret_cast<const uint16_t*>(w), rows, cols}, x.data(),
                    n, y.data(), pool);
  });
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void with_min_max(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMicrosecond)
      ->ComputeStatistics("min", min_of)
      ->ComputeStatistics("max", max_of);
}

void configure(benchmark::internal::Benchmark* b) {
  with_min_max(b->ArgNames({"rows", "cols", "n", "threads"})->UseManualTime());
}

// K3 expert: gate/up (w1, w3) [3072, 3584] and down (w2) [3584, 3072].
BENCHMARK(BM_Mxfp4Matmul)
    ->Apply(configure)
    ->Args({3072, 3584, 1, 1})
    ->Args({3584, 3072, 1, 1})
    ->Args({3072, 3584, 1, 2})
    ->Args({3584, 3072, 1, 2})
    ->Args({3072, 3584, 16, 1})
    ->Args({3072, 3584, 16, 2});
// Batch scaling (verify passes of 2-16 rows): time(n) / time(1) on a K3 expert's fused gate/up
// shape, 1 thread and 2.
BENCHMARK(BM_Mxfp4Matmul)
    ->Name("BM_Mxfp4Batch")
    ->Apply(configure)
    ->ArgsProduct({{3072}, {7168}, {1, 2, 4, 8, 16}, {1, 2}});
// K3 KDA q/k/v/g projection [12288, 7168].
BENCHMARK(BM_Bf16Matmul)
    ->Apply(configure)
    ->Args({12288, 7168, 1, 1})
    ->Args({12288, 7168, 1, 2})
    ->Args({12288, 7168, 16, 2});
// Batch scaling on a spine projection [7168, 12288] (KDA/MLA output side).
BENCHMARK(BM_Bf16Matmul)
    ->Name("BM_Bf16Batch")
    ->Apply(configure)
    ->ArgsProduct({{7168}, {12288}, {1, 2, 4, 8, 16}, {1, 2}});

// The compute ceiling: the same GEMVs on one copy of the weights small enough to stay in L2
// (about 1 MB), one thread. weight_GBps well above the cold read bandwidth means the cold figures
// are limited by memory, not by decoding; over n, what extra rows cost in arithmetic alone (the
// CPU time column). Args: rows, cols, n.
void BM_Mxfp4MatmulHot(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  std::vector<uint8_t> packed(rows * cols / 2), scales(rows * cols / 32);
  Xorshift rng;
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  for (auto& b : scales) b = static_cast<uint8_t>(118 + rng() % 12);
  const std::vector<float> x = random_x(n * cols);
  std::vector<float> y(n * rows);
  base::ThreadPool pool(1);
  const kernels::Mxfp4Matrix w{packed.data(), scales.data(), rows, cols};
  for (auto _ : state) {
    kernels::matmul(w, x.data(), n, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(packed.size() + scales.size()) * state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Mxfp4MatmulHot)
    ->ArgNames({"rows", "cols", "n"})
    ->ArgsProduct({{512}, {3584}, {1, 2, 4, 8, 16}})
    ->ArgsProduct({{256}, {7168}, {1, 2, 4, 8, 16}})
    ->Apply(with_min_max);

void BM_Bf16MatmulHot(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  std::vector<uint16_t> data(rows * cols);
  Xorshift rng;
  for (auto& v : data) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x87ff));
  const std::vector<float> x = random_x(n * cols);
  std::vector<float> y(n * rows);
  base::ThreadPool pool(1);
  const kernels::Bf16Matrix w{data.data(), rows, cols};
  for (auto _ : state) {
    kernels::matmul(w, x.data(), n, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(data.size() * 2) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Bf16MatmulHot)
    ->ArgNames({"rows", "cols", "n"})
    ->ArgsProduct({{64}, {7168}, {1, 2, 4, 8, 16}})
    ->Apply(with_min_max);

// The int8 spine's product (--spine-dtype int8, lossy), hot, against BF16's above: the same shape,
// half the weight bytes plus a scale per row.
void BM_Int8MatmulHot(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  std::vector<int8_t> q(rows * cols);
  std::vector<float> scales(rows, 1.0f / 127);
  Xorshift rng;
  for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  const std::vector<float> x = random_x(n * cols);
  std::vector<float> y(n * rows);
  base::ThreadPool pool(1);
  const kernels::Int8Matrix w{q.data(), reinterpret_cast<const uint8_t*>(scales.data()), rows,
                              cols};
  for (auto _ : state) {
    kernels::matmul(w, x.data(), n, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GBps"] = benchmark::Counter(
      static_cast<double>(q.size() + scales.size() * 4) * state.iterations() / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Int8MatmulHot)
    ->ArgNames({"rows", "cols", "n"})
    ->ArgsProduct({{64}, {7168}, {1, 2, 4, 8, 16}})
    ->Apply(with_min_max);

// The element-wise kernels around the GEMVs, hot in cache (they touch kilobytes): SiTU over one
// expert's intermediate (3072), RMSNorm over the hidden size (7168), softmax over 4096 scores.
void BM_SituGlu(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> g = random_x(n), u = random_x(n);
  std::vector<float> y(n);
  for (auto _ : state) {
    kernels::situ_glu(g.data(), u.data(), n, 4.0f, 25.0f, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_SituGlu)->Arg(3072)->Apply(with_min_max);

void BM_Rmsnorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = random_x(n), w = random_x(n);
  std::vector<float> y(n);
  for (auto _ : state) {
    kernels::rmsnorm(x.data(), w.data(), n, 1e-5f, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Rmsnorm)->Arg(7168)->Apply(with_min_max);

void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = random_x(n);
  std::vector<float> y(n);
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), n * sizeof(float));
    kernels::softmax(y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Softmax)->Arg(4096)->Apply(with_min_max);

// One KDA head (K3: head_dim 128) on one thread: a decode token through the recurrence, and a
// prefill chunk of kKdaChunkTokens tokens through the recurrence and through the chunked form.
struct KdaHead {
  int64_t n, dim;
  std::vector<float> q, k, v, g, beta, state, o, scratch;
  KdaHead(int64_t rows, int64_t d, bool chunked)
      : n(rows),
        dim(d),
        q(random_x(rows * d)),
        k(random_x(rows * d)),
        v(random_x(rows * d)),
        g(rows * d, -0.05f),
        beta(rows, 0.5f),
        state(d * d, 0.0f),
        o(rows * d),
        scratch(chunked ? kernels::kda_chunked_scratch_floats(d, kernels::kKdaChunkTokens)
                        : kernels::kda_recurrent_scratch_floats(d)) {
    kernels::l2norm_rows(q.data(), rows, d, 1.0f / std::sqrt(static_cast<float>(d)));
    kernels::l2norm_rows(k.data(), rows, d, 1.0f);
  }
};

void BM_KdaRecurrent(benchmark::State& state) {
  KdaHead h(state.range(0), 128, false);
  for (auto _ : state) {
    kernels::kda_recurrent(h.q.data(), h.k.data(), h.v.data(), h.g.data(), h.beta.data(), h.n,
                           h.dim, h.dim, 1, h.state.data(), h.o.data(), h.scratch.data());
    benchmark::DoNotOptimize(h.o.data());
  }
  state.SetItemsProcessed(state.iterations() * h.n);
}
BENCHMARK(BM_KdaRecurrent)->Arg(1)->Arg(kernels::kKdaChunkTokens)->Apply(with_min_max);

void BM_KdaChunked(benchmark::State& state) {
  KdaHead h(state.range(0), 128, true);
  for (auto _ : state) {
    kernels::kda_chunked(h.q.data(), h.k.data(), h.v.data(), h.g.data(), h.beta.data(), h.n, h.dim,
                         h.dim, 1, kernels::kKdaChunkTokens, h.state.data(), h.o.data(),
                         h.scratch.data());
    benchmark::DoNotOptimize(h.o.data());
  }
  state.SetItemsProcessed(state.iterations() * h.n);
}
BENCHMARK(BM_KdaChunked)->Arg(kernels::kKdaChunkTokens)->Apply(with_min_max);

// A decode token's short convolution over K3's q (12288 channels, kernel 4).
void BM_ShortConv(benchmark::State& state) {
  const int64_t p = 12288, kernel = 4;
  const std::vector<float> x = random_x(p), w = random_x(p * kernel);
  std::vector<float> hist = random_x((kernel - 1) * p), y(p);
  for (auto _ : state) {
    kernels::short_conv_silu(x.data(), 1, p, kernel, w.data(), hist.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * p);
}
BENCHMARK(BM_ShortConv)->Apply(with_min_max);

// A decode token's AttnRes mix at K3's last site: 8 blocks and the partial sum of 7168.
void BM_AttnResMix(benchmark::State& state) {
  const int64_t hidden = 7168, n_blocks = 8;
  const std::vector<float> key = random_x(hidden), blocks = random_x(n_blocks * hidden);
  const std::vector<float> partial = random_x(hidden);
  std::vector<float> out(hidden);
  for (auto _ : state) {
    kernels::attn_res_mix(key.data(), blocks.data(), n_blocks, hidden, partial.data(), 1, hidden,
                          1e-5f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * (n_blocks + 1) * hidden);
}
BENCHMARK(BM_AttnResMix)->Apply(with_min_max);

// A decode token's MLA attention in K3's dimensions (96 heads, latent 512, BF16 kv_b_proj) over a
// cache of range(0) positions, on the default pool: absorbed (the decode form) and expanded.
struct MlaCase {
  kernels::MlaDims dims{96, 512, 128, 64, 128};
  std::vector<uint16_t> kv_b;
  std::vector<float> latent, k_pe, q, o, scratch;
  explicit MlaCase(int64_t positions, bool absorbed)
      : kv_b(dims.n_heads * dims.kv_width() * dims.kv_lora_rank, 0x3c00),  // bf16 0.0078125
        latent(random_x(positions * dims.kv_lora_rank)),
        k_pe(random_x(positions * dims.rope_dim)),
        q(random_x(dims.n_heads * dims.qk_dim())),
        o(dims.n_heads * dims.v_dim),
        scratch(absorbed ? kernels::mla_absorbed_scratch_floats(dims, 1, positions)
                         : kernels::mla_expanded_scratch_floats(dims, positions)) {}
  kernels::WeightMatrix weights() const {
    return {kernels::WeightDType::kBF16, reinterpret_cast<const uint8_t*>(kv_b.data()), nullptr,
            dims.n_heads * dims.kv_width(), dims.kv_lora_rank};
  }
  kernels::LatentCache cache() const {
    return {latent.data(), k_pe.data(), static_cast<int64_t>(k_pe.size()) / dims.rope_dim};
  }
};

void BM_MlaAbsorbed(benchmark::State& state) {
  MlaCase c(state.range(0), true);
  for (auto _ : state) {
    kernels::mla_attend_absorbed(c.dims, c.weights(), c.cache(), c.q.data(), 1, c.scratch.data(),
                                 c.o.data());
    benchmark::DoNotOptimize(c.o.data());
  }
}
BENCHMARK(BM_MlaAbsorbed)->Arg(4096)->Apply(with_min_max);

void BM_MlaExpanded(benchmark::State& state) {
  MlaCase c(state.range(0), false);
  for (auto _ : state) {
    kernels::mla_attend_expanded(c.dims, c.weights(), c.cache(), c.q.data(), 1, c.scratch.data(),
                                 c.o.data());
    benchmark::DoNotOptimize(c.o.data());
  }
}
BENCHMARK(BM_MlaExpanded)->Arg(64)->Apply(with_min_max);

}  // namespace
}  // namespace deltafin

BENCHMARK_MAIN();
