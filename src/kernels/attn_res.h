// The Attention Residuals mix (K3): per row, a softmax over depth of the stored block
// representations and the live partial sum, each scored against a learned key after RMS scaling.
#pragma once

#include <cstdint>

namespace deltafin::kernels {

// Most blocks one mix may see (K3: 93 layers in blocks of 12 give 8).
inline constexpr int64_t kAttnResMaxBlocks = 63;

// out[r] = Σ_i softmax_i(s)[r] · V_i[r] over sources V = blocks ++ [prefix], with
// s_i = (V_i · key) / sqrt(mean(V_i²) + eps). Block i row r is at blocks + i · block_stride +
// r · hidden, prefix row r at prefix + r · hidden; key is [hidden]. out aliases no source.
void attn_res_mix(const float* key, const float* blocks, int64_t n_blocks, int64_t block_stride,
                  const float* prefix, int64_t n, int64_t hidden, float eps, float* out);

}  // namespace deltafin::kernels
