// GPU tests of the device layout of MXFP4 codes (mxfp4_layout.cuh, mxfp4_layout.h): every 32-bit
// word decodes to e2m1x8_raw's floats and e2m1x8_bf16's pairs (the published layout's decodes)
// from its permuted form and moves back unchanged, and the device pass moves a buffer's words, or
// only its spans' words, as the host function does and back.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemv_common.cuh"
#include "cuda/gpu_test_util.h"
#include "cuda/mxfp4_layout.cuh"
#include "cuda/mxfp4_layout.h"
#include "cuda/mxfp4_tc_math.cuh"
#include "cuda/op_count.h"

namespace deltafin::cuda {
namespace {

using testing::DeviceBuffer;
using testing::expect;

// Over all 2^32 words: stats[0] counts words whose permuted decodes differ from e2m1x8_raw's or
// e2m1x8_bf16's (bitwise), stats[1] words that do not move back to themselves, stats[2] the first
// such word.
__global__ void every_word_kernel(unsigned long long* stats) {
  unsigned long long bad_decode = 0, bad_round_trip = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < (1ull << 32);
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const auto w = static_cast<uint32_t>(i);
    const uint32_t p = gemv::permute_e2m1_word(w);
    float want[8], got[8];
    gemv::e2m1x8_raw(w, want);
    gemv::e2m1x8_permuted(p, got);
    bool same = true;
#pragma unroll
    for (int j = 0; j < 8; ++j) same = same && __float_as_uint(want[j]) == __float_as_uint(got[j]);
    uint32_t want2[4], got2[4];
    tc_math::e2m1x8_bf16(w, want2);
    gemv::e2m1x8_bf16_permuted(p, got2);
#pragma unroll
    for (int j = 0; j < 4; ++j) same = same && want2[j] == got2[j];
    const bool back = gemv::unpermute_e2m1_word(p) == w;
    bad_decode += !same;
    bad_round_trip += !back;
    if (!same || !back) atomicCAS(&stats[2], ~0ull, i);
  }
  if (bad_decode) atomicAdd(&stats[0], bad_decode);
  if (bad_round_trip) atomicAdd(&stats[1], bad_round_trip);
}

void test_every_word() {
  DeviceBuffer<unsigned long long> stats(std::vector<unsigned long long>{0, 0, ~0ull});
  every_word_kernel<<<1024, 256>>>(stats.ptr);
  testing::check(cudaGetLastError(), "every_word_kernel");
  const auto s = stats.download(3);
  char first[32];
  std::snprintf(first, sizeof first, "%08llx", s[2]);
  expect(s[0] == 0, "permuted E2M1 decodes == e2m1x8_raw and e2m1x8_bf16 for all 2^32 words (" +
                        std::to_string(s[0]) + " differ, first " + first + ")");
  expect(s[1] == 0, "permuted E2M1 words move back to themselves (" + std::to_string(s[1]) +
                        " do not, first " + first + ")");
  // Each bit alone lands where the layout's table says (the table and the moves agree).
  int misplaced = 0;
  for (int j = 0; j < 8; ++j)
    for (int r = 0; r < 4; ++r)
      misplaced += gemv::permute_e2m1_word(1u << (4 * j + r)) != 1u << gemv::kE2m1Moved[j][r];
  expect(misplaced == 0, "each code bit moves to kE2m1Moved's place");
  std::printf("ok   permuted E2M1 layout: all 2^32 words decode alike and move back\n");
}

std::vector<uint8_t> random_bytes(uint32_t seed, size_t count) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(count);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// The words of `moved` that are not `host`'s word moved by permute_e2m1_word where `inside` says
// (every word when it is empty) and unchanged elsewhere.
size_t words_wrong(const std::vector<uint8_t>& host, const std::vector<uint8_t>& moved,
                   const std::vector<bool>& inside = {}) {
  size_t wrong = 0;
  for (size_t i = 0; i < host.size(); i += 4) {
    uint32_t w = 0, got = 0;
    std::memcpy(&w, host.data() + i, 4);
    std::memcpy(&got, moved.data() + i, 4);
    wrong += got != (inside.empty() || inside[i / 4] ? gemv::permute_e2m1_word(w) : w);
  }
  return wrong;
}

void test_device_pass() {
  const std::vector<uint8_t> host = random_bytes(20261207, 64 * 1024 + 48);
  DeviceBuffer<uint8_t> d(host);
  permute_mxfp4_codes(d.ptr, host.size(), true);
  expect(words_wrong(host, d.download(host.size())) == 0,
         "permute_mxfp4_codes moves each word as permute_e2m1_word does");
  permute_mxfp4_codes(d.ptr, host.size(), false);
  const auto back = d.download(host.size());
  expect(std::memcmp(back.data(), host.data(), host.size()) == 0,
         "permute_mxfp4_codes backward restores the bytes");
  const std::string odd =
      testing::invalid_argument_message([&] { permute_mxfp4_codes(d.ptr, 40, true); });
  const std::string skewed =
      testing::invalid_argument_message([&] { permute_mxfp4_codes(d.ptr + 4, 32, true); });
  expect(odd.find("40 bytes") != std::string::npos && !skewed.empty(),
         "permute_mxfp4_codes refuses a size not a multiple of 16 and an unaligned address: '" +
             odd + "'");
  std::printf("ok   permute_mxfp4_codes: %zu bytes there and back\n", host.size());
}

// Spans of several sizes (one empty) in one buffer, more than one launch holds, with gaps between
// them that must stay as they are.
void test_device_spans() {
  const std::vector<uint8_t> host = random_bytes(20261208, 256 * 1024);
  DeviceBuffer<uint8_t> d(host);
  std::vector<CodeSpan> spans;
  std::vector<bool> inside(host.size() / 4, false);
  size_t at = 32;
  for (int k = 0; k < kMaxCodeSpans + 3; ++k) {
    const size_t bytes = k == 4 ? 0 : 16 * (1 + (k * 977) % 1500);
    spans.push_back({d.ptr + at, bytes});
    for (size_t i = at; i < at + bytes; i += 4) inside[i / 4] = true;
    at += bytes + 48;
  }
  const uint64_t launches = t_op_counts.launches;
  permute_mxfp4_codes(spans, true);
  const uint64_t took = t_op_counts.launches - launches;
  const size_t wrong = words_wrong(host, d.download(host.size()), inside);
  expect(wrong == 0, "permute_mxfp4_codes moves the spans' words and no others (" +
                         std::to_string(wrong) + " words wrong)");
  expect(took == 2, "permute_mxfp4_codes counts one launch a " + std::to_string(kMaxCodeSpans) +
                        " spans (" + std::to_string(took) + " for " + std::to_string(spans.size()) +
                        ")");
  permute_mxfp4_codes(spans, false);
  const auto back = d.download(host.size());
  expect(std::memcmp(back.data(), host.data(), host.size()) == 0,
         "permute_mxfp4_codes backward restores the spans");
  std::printf("ok   permute_mxfp4_codes: %zu spans, %llu launches\n", spans.size(),
              static_cast<unsigned long long>(took));
}

}  // namespace

void run_layout_tests() {
  test_every_word();
  test_device_pass();
  test_device_spans();
}

}  // namespace deltafin::cuda
