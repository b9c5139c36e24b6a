// Rotary position embedding, NeoX layout (HF rotate_half: channel i pairs with i + head_dim/2),
// as Qwen3 applies it to q and k after their per-head norms.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// Rotates x [rows, n_heads, head_dim] in place; row r is at position first_position + r. Pair i
// turns by position · theta^(−2i/head_dim), the angle and its cos/sin taken in double and
// rounded to float once, so a row's result depends only on its position (a row of a many-row
// call equals a one-row call at that position, bit for bit). head_dim must be even.
void rope_neox_rows(float* x, int64_t rows, int64_t n_heads, int64_t head_dim,
                    int64_t first_position, double theta);

}  // namespace deltafin::kernels
