// Planted cycles (`synth --plant-cycles`): a synthetic checkpoint's values rewritten so that the
// greedy next id of chosen ids follows a known permutation, for measuring speculation on output
// that repeats and on drafts that fail at every step (docs/SYNTH.md, "Planted cycles").
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/config.h"
#include "synth/layout.h"

namespace deltafin::synth {

// The permutation pi over the planted ids: each cycle in order, pi(c[i]) = c[i + 1] and
// pi(c.back()) = c.front().
struct PlantedCycles {
  std::vector<std::vector<int32_t>> cycles;

  bool empty() const { return cycles.empty(); }
  // pi(id), or -1 when id is not planted.
  int32_t next(int32_t id) const;
};

// "4,64" -> {4, 64}: one cycle per length, each at least 1. Throws base::Error naming the spec.
std::vector<int> parse_cycle_lengths(std::string_view spec);

// The planted ids: distinct ordinary ids, the BPE merges [256, base_vocab) (no single bytes, no
// reserved or special ids), in a seeded shuffle; cycle k takes the next lengths[k] of them. The
// same (lengths, base_vocab, seed) always gives the same cycles. Throws base::Error when they do
// not fit.
PlantedCycles choose_cycles(const std::vector<int>& lengths, int base_vocab, uint64_t seed);

// Every tensor that writes into the residual stream is scaled by this (a power of two, so BF16
// values stay exact): the output mix is then dominated by its embedding source.
inline constexpr float kPlantBlockScale = 1.0f / 16;
// The logit of pi(t) when the output mix is a multiple of embed(t): random lm_head rows give
// logits of std ~3 (the largest of K3's vocabulary ~15).
inline constexpr float kPlantLogit = 40.0f;

// Whether planting rewrites a tensor of this role: the block outputs (KDA and MLA o_proj, the
// dense down_proj, the shared experts' down_proj, the latent MoE's up-projection), the output
// AttnRes projection (zeroed: a uniform output mix) and lm_head (the planted rows).
bool plant_touches(format::Role role);

class Planter {
 public:
  // Reads the planted ids' embedding rows and the final norm's weight from the seeded generator:
  // the values the shards get.
  Planter(const format::ModelConfig& config, uint64_t seed, PlantedCycles cycles);

  const PlantedCycles& cycles() const { return cycles_; }
  // lm_head row pi(t) for a planted t, as BF16 bits:
  // kPlantLogit / (hidden * rms(e_t)) * e_t / w, e_t = embed row t, w = the final norm's weight,
  // so that lm_head row pi(t) . RMSNorm_w(c * e_t) = kPlantLogit for any c > 0.
  const std::vector<uint16_t>& head_row(int32_t target) const { return head_rows_.at(target); }

  // Rewrites bytes [byte_begin, byte_begin + out.size()) of tensor t, as fill_tensor_bytes made
  // them (the same element alignment). Tensors plant_touches() does not name are left alone.
  void apply(const TensorSpec& t, uint64_t byte_begin, std::span<std::byte> out) const;

 private:
  int64_t hidden_ = 0;
  PlantedCycles cycles_;
  std::map<int32_t, std::vector<uint16_t>> head_rows_;  // pi(t) -> [hidden] BF16 bits
};

// planted_cycles.json: {"cycles": [[ids in pi order], ...], "block_output_scale": ...,
// "planted_logit": ...}.
std::string planted_cycles_json(const PlantedCycles& cycles);

}  // namespace deltafin::synth
