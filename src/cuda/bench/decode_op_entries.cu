// The benchmark's decode-op entries: the KDA step, absorbed MLA and the AttnRes mix over K3's
// shapes (decode_ops.h), and the logits row's copy to the host.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/bench/entries.h"
#include "cuda/bench/harness.h"
#include "cuda/decode_ops.h"

namespace deltafin::cuda::bench {

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
void bench_mla(int reps, int64_t positions, const std::string& variant) {
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

}  // namespace deltafin::cuda::bench
