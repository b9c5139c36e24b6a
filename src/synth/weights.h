// Seeded synthetic weight values: any byte range of any tensor, computed on demand, so tensors of
// many GB stream out through a small buffer and every run with the same seed is byte-identical.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "synth/layout.h"

namespace deltafin::synth {

// Fills `out` with bytes [byte_begin, byte_begin + out.size()) of tensor `t`'s data. `key` is
// tensor_key(seed, t.name). byte_begin and out.size() must be multiples of the element size; the
// bytes depend only on (key, position), never on how the tensor is cut into chunks.
void fill_tensor_bytes(const TensorSpec& t, uint64_t key, uint64_t byte_begin,
                       std::span<std::byte> out);

// Round to nearest, ties to even (the conversion torch and the oracles use).
uint16_t float_to_bf16_bits(float value);

}  // namespace deltafin::synth
