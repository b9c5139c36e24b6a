// Value generators per initializer: uniform BF16/F32 weights, norm weights near 1, K3's padded
// A_log, MXFP4 codes and E8M0 scales. Everything starts as the tensor's raw random byte stream
// (byte j = byte j % 8 of stream word j / 8); BF16 elements and scale bytes are then mapped in
// place by plain loops the compiler vectorizes, so generation outruns the disk.
#include "synth/weights.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "synth/random.h"
#include "synth/tokenizer_files.h"

namespace deltafin::synth {
namespace {

constexpr float kSqrt3 = 1.7320508f;  // uniform on (-a, a) has std a / sqrt(3)

void random_bytes(uint64_t key, uint64_t first, size_t n, std::byte* out) {
  size_t j = 0;
  for (; j < n && ((first + j) & 7) != 0; ++j) {
    const uint64_t pos = first + j;
    out[j] = static_cast<std::byte>(stream_word(key, pos >> 3) >> (8 * (pos & 7)));
  }
  for (; j + 8 <= n; j += 8) {
    const uint64_t w = stream_word(key, (first + j) >> 3);
    std::memcpy(out + j, &w, 8);  // little-endian: byte k of the word is stream byte 8i + k
  }
  for (; j < n; ++j) {
    const uint64_t pos = first + j;
    out[j] = static_cast<std::byte>(stream_word(key, pos >> 3) >> (8 * (pos & 7)));
  }
}

// BF16 elements in place: 16 random bits -> offset + uniform(-a, a), rounded to BF16. Through a
// 65,536-entry table (rebuilt only when (a, offset) changes): one load per element instead of a
// conversion and a rounding.
void bits_to_bf16(std::byte* data, size_t n, float amplitude, float offset) {
  thread_local std::vector<uint16_t> table;
  thread_local float table_amplitude = 0.0f, table_offset = 0.0f;
  if (table.empty() || table_amplitude != amplitude || table_offset != offset) {
    table.resize(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      table[bits] = float_to_bf16_bits(offset + unit_from16(bits) * amplitude);
    }
    table_amplitude = amplitude;
    table_offset = offset;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, data + 2 * i, 2);
    std::memcpy(data + 2 * i, &table[bits], 2);
  }
}

void fill_bf16(const TensorSpec& t, uint64_t first, size_t n, std::byte* out) {
  const float amplitude = t.std * kSqrt3;
  switch (t.init) {
    case Init::kUniform:
      bits_to_bf16(out, n, amplitude, 0.0f);
      return;
    case Init::kNearOne:
      bits_to_bf16(out, n, amplitude, 1.0f);
      return;
    case Init::kUniformTail: {
      // lm_head rows of reserved ids (from n_valid on) and of single bytes that are not text get
      // 1/16 of the amplitude. Walk the range in runs of rows of one kind.
      const uint64_t row_len = static_cast<uint64_t>(t.shape.back());
      const uint64_t n_valid = static_cast<uint64_t>(t.n_valid);
      for (size_t j = 0; j < n;) {
        const uint64_t i = first + j;
        const uint64_t row = i / row_len;
        const uint64_t run_end = row < 256       ? (row + 1) * row_len
                                 : row < n_valid ? n_valid * row_len
                                                 : first + n;
        const size_t run = static_cast<size_t>(std::min<uint64_t>(run_end, first + n) - i);
        const bool damped = row < 256 ? !is_text_byte_rank(static_cast<int>(row)) : row >= n_valid;
        bits_to_bf16(out + 2 * j, run, damped ? amplitude / 16.0f : amplitude, 0.0f);
        j += run;
      }
      return;
    }
    default:
      base::fail("synth: tensor ", t.name, " has no BF16 initializer");
  }
}

// F32 tensors are small (conv, gates, biases, A_log): element i takes the low 16 bits of its
// 4 stream bytes.
void fill_f32(const TensorSpec& t, uint64_t first, size_t n, std::byte* out) {
  for (size_t j = 0; j < n; ++j) {
    const uint64_t i = first + j;
    uint32_t raw;
    std::memcpy(&raw, out + 4 * j, 4);
    const uint32_t bits = raw & 0xffff;
    float v = 0.0f;
    switch (t.init) {
      case Init::kUniform:
        v = unit_from16(bits) * (t.std * kSqrt3);
        break;
      case Init::kNearOne:
        v = 1.0f + unit_from16(bits) * (t.std * kSqrt3);
        break;
      case Init::kALog:
        // Per-head decay rates A in [1, 16) as KDA initializes them; past the head count K3
        // stores exact zeros.
        v = i < static_cast<uint64_t>(t.n_valid)
                ? std::log(1.0f + 15.0f * static_cast<float>(bits) * (1.0f / 65536.0f))
                : 0.0f;
        break;
      default:
        base::fail("synth: tensor ", t.name, " has no F32 initializer");
    }
    std::memcpy(out + 4 * j, &v, 4);
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
  random_bytes(key, byte_begin, out.size(), out.data());
  const uint64_t first = byte_begin / esize;
  const size_t n = out.size() / esize;
  switch (t.dtype) {
    case format::DType::kU8:
      if (t.init == Init::kScaleBytes) {
        const uint32_t lo = t.scale_lo, span = uint32_t(t.scale_hi) - t.scale_lo + 1;
        auto* p = reinterpret_cast<uint8_t*>(out.data());
        for (size_t j = 0; j < n; ++j) p[j] = static_cast<uint8_t>(lo + ((p[j] * span) >> 8));
      } else if (t.init != Init::kRandomBytes) {
        base::fail("synth: tensor ", t.name, " has no U8 initializer");
      }
      return;
    case format::DType::kBF16:
      fill_bf16(t, first, n, out.data());
      return;
    case format::DType::kF32:
      fill_f32(t, first, n, out.data());
      return;
    default:
      base::fail("synth: tensor ", t.name, " has an unsupported dtype");
  }
}

}  // namespace deltafin::synth
