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
// DELTAFIN_BENCH_BF16_BALANCED=1 balances the rows of BF16 blocks at 8 rows on a fast card
// (gemv_knobs.h set_bf16_balanced): two runs, one with it, compare the two.
//
// main: the device line and the copy and read ceilings, then the entries DELTAFIN_BENCH_ONLY
// keeps (entries.h).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "cuda/bench/entries.h"
#include "cuda/bench/harness.h"
#include "cuda/decode_ops.h"
#include "cuda/gemv_knobs.h"
#include "cuda/gemv_launch.cuh"
#include "cuda/gemv_mxfp4_tc.h"
#include "cuda/gpu_test_util.h"

int main(int argc, char** argv) {
  using namespace deltafin::cuda;
  using namespace deltafin::cuda::bench;
  testing::require_gpu("deltafin_cuda_bench");
  const int reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 15;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "props");
  g_sms = prop.multiProcessorCount;
  g_graph = switch_on("DELTAFIN_BENCH_GRAPH");
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
  if (switch_on("DELTAFIN_BENCH_BF16_BALANCED")) {
    detail::set_bf16_balanced(true);
    std::printf("BF16 blocks at 8 rows: balanced rows (DELTAFIN_BENCH_BF16_BALANCED=1%s)\n",
                per_sm > gemv::kFastDramGbpsPerSm ? "" : "; this card keeps full blocks");
  }

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
    bench_spine_launches(reps, wanted_rows({1, 8, 16}), switch_on("DELTAFIN_BENCH_SHAPES"));
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
