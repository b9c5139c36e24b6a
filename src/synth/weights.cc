// Value generators per initializer: uniform BF16/F32 weights, norm weights near 1, K3's padded
// A_log, MXFP4 codes and E8M0 scales.
#include "synth/weights.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "synth/random.h"

namespace deltafin::synth {
namespace {

// Value of element i of a kUniform / kNearOne / kALog tensor from its 16 random bits.
inline float value_from_bits(const TensorSpec& t, uint32_t bits, uint64_t i) {
  switch (t.init) {
    case Init::kUniform:
      // Uniform on (-a, a) has std a / sqrt(3).
      return unit_from16(bits) * (t.std * 1.7320508f);
    case Init::kUniformTail: {
      const uint64_t row = i / static_cast<uint64_t>(t.shape.back());
      const float scale = row < static_cast<uint64_t>(t.n_valid) ? 1.0f : 1.0f / 16.0f;
      return unit_from16(bits) * (t.std * 1.7320508f * scale);
    }
    case Init::kNearOne:
      return 1.0f + unit_from16(bits) * (t.std * 1.7320508f);
    case Init::kALog: {
      // Per-head decay rates A in [1, 16) as in KDA's initialization; past the head count K3
      // stores exact zeros.
      if (i >= static_cast<uint64_t>(t.n_valid)) return 0.0f;
      const float u = static_cast<float>(bits) * (1.0f / 65536.0f);
      return std::log(1.0f + 15.0f * u);
    }
    default:
      return 0.0f;
  }
}

// Calls emit(j, value) for elements first..first+n-1; element i takes 16-bit lane i % 4 of stream
// word i / 4, so one word serves four elements.
template <typename Emit>
void for_each_value(const TensorSpec& t, uint64_t key, uint64_t first, size_t n, Emit emit) {
  uint64_t word_index = ~uint64_t{0};
  uint64_t word = 0;
  for (size_t j = 0; j < n; ++j) {
    const uint64_t i = first + j;
    if ((i >> 2) != word_index) {
      word_index = i >> 2;
      word = stream_word(key, word_index);
    }
    emit(j, value_from_bits(t, static_cast<uint32_t>(word >> (16 * (i & 3))) & 0xffff, i));
  }
}

void fill_floats(const TensorSpec& t, uint64_t key, uint64_t first, size_t n, std::byte* out) {
  if (t.dtype == format::DType::kBF16) {
    for_each_value(t, key, first, n, [out](size_t j, float v) {
      const uint16_t b = float_to_bf16_bits(v);
      std::memcpy(out + 2 * j, &b, 2);
    });
  } else if (t.dtype == format::DType::kF32) {
    for_each_value(t, key, first, n, [out](size_t j, float v) { std::memcpy(out + 4 * j, &v, 4); });
  } else {
    base::fail("synth: tensor ", t.name, " has no float initializer for its dtype");
  }
}

// Bytes of U8 tensors: byte j is byte (j % 8) of stream word j / 8.
template <typename Map>
void fill_bytes(uint64_t key, uint64_t first, size_t n, std::byte* out, Map map) {
  size_t j = 0;
  while (j < n && ((first + j) & 7) != 0) {
    const uint64_t pos = first + j;
    out[j++] = static_cast<std::byte>(map(uint8_t(stream_word(key, pos >> 3) >> (8 * (pos & 7)))));
  }
  for (; j + 8 <= n; j += 8) {
    uint64_t w = stream_word(key, (first + j) >> 3);
    uint8_t b[8];
    for (int k = 0; k < 8; ++k) b[k] = map(uint8_t(w >> (8 * k)));
    std::memcpy(out + j, b, 8);
  }
  for (; j < n; ++j) {
    const uint64_t pos = first + j;
    out[j] = static_cast<std::byte>(map(uint8_t(stream_word(key, pos >> 3) >> (8 * (pos & 7)))));
  }
}

}  // namespace

uint16_t float_to_bf16_bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  return static_cast<uint16_t>((u + (((u >> 16) & 1) + 0x7fff)) >> 16);
}

void fill_tensor_bytes(const TensorSpec& t, uint64_t key, uint64_t byte_begin,
                       std::span<std::byte> out) {
  const size_t esize = format::dtype_size(t.dtype);
  DF_ASSERT(byte_begin % esize == 0 && out.size() % esize == 0);
  DF_ASSERT(byte_begin + out.size() <= t.nbytes());
  switch (t.init) {
    case Init::kRandomBytes:
      fill_bytes(key, byte_begin, out.size(), out.data(), [](uint8_t b) { return b; });
      return;
    case Init::kScaleBytes: {
      const uint32_t lo = t.scale_lo, span = uint32_t(t.scale_hi) - t.scale_lo + 1;
      fill_bytes(key, byte_begin, out.size(), out.data(),
                 [lo, span](uint8_t b) { return uint8_t(lo + ((uint32_t(b) * span) >> 8)); });
      return;
    }
    default:
      fill_floats(t, key, byte_begin / esize, out.size() / esize, out.data());
  }
}

}  // namespace deltafin::synth
