// Attention Residuals (K3): a softmax over depth that mixes the stored block representations and
// the live partial sum of the current block, per token, before attention, before the MLP and at
// the output.
#pragma once

#include <cstdint>
#include <vector>

namespace deltafin::model {

// One mixing site: the key is norm_w ⊙ proj_w[0, :] (folded at load; the product of two BF16
// values is exact in fp32).
struct AttnResSite {
  std::vector<float> key;  // [hidden]
};

// out[r] = Σ_i softmax_i(s)[r] · V_i[r] over sources V = blocks ++ [prefix], with
// s_i = (V_i · key) / sqrt(mean(V_i²) + eps). Each source is [n, hidden]; out may alias nothing.
void attn_res_mix(const AttnResSite& site, const std::vector<const float*>& blocks,
                  const float* prefix, int64_t n, int64_t hidden, float eps, float* out);

}  // namespace deltafin::model
