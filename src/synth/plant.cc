// Planted cycles. The output of a K3 forward is lm_head(RMSNorm_w(AttnRes_out(h, B))), and the
// output mix's first source B_0 is the current id's embedding. Scaling every block output down
// (kPlantBlockScale) and zeroing the output mix's projection (its softmax becomes uniform, so
// B_0's weight is 1 / (blocks + 1) whatever the id) leaves that mix close to a multiple of
// embed(t); lm_head row pi(t), a multiple of embed(t) / w, then scores kPlantLogit there, far
// above the random rows.
#include "synth/plant.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/error.h"
#include "synth/random.h"
#include "synth/weights.h"

namespace deltafin::synth {
namespace {

using format::Role;

float bf16_value(uint16_t bits) {
  const uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> bf16_values(const TensorSpec& t, uint64_t seed, uint64_t first_element,
                               size_t n) {
  DF_ASSERT(t.dtype == format::DType::kBF16);
  std::vector<std::byte> bytes(2 * n);
  fill_tensor_bytes(t, tensor_key(seed, t.name), 2 * first_element, bytes);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    out[i] = bf16_value(bits);
  }
  return out;
}

bool scales_block_output(Role role) {
  switch (role) {
    case Role::kKdaOProj:
    case Role::kMlaOProj:
    case Role::kMlpDown:
    case Role::kSharedDown:
    case Role::kLatentUp:
      return true;
    default:
      return false;
  }
}

}  // namespace

int32_t PlantedCycles::next(int32_t id) const {
  for (const std::vector<int32_t>& c : cycles) {
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i] == id) return c[(i + 1) % c.size()];
    }
  }
  return -1;
}

std::vector<int> parse_cycle_lengths(std::string_view spec) {
  std::vector<int> lengths;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string_view part = spec.substr(pos, comma - pos);
    int v = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || v < 1) {
      base::fail("synth: --plant-cycles '", spec,
                 "' must be cycle lengths of at least 1 separated by commas, e.g. 4,64");
    }
    lengths.push_back(v);
    pos = comma + 1;
  }
  return lengths;
}

PlantedCycles choose_cycles(const std::vector<int>& lengths, int base_vocab, uint64_t seed) {
  const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  const int first = 256, n_candidates = base_vocab - first;
  if (total > n_candidates) {
    base::fail("synth: --plant-cycles asks for ", total, " ids, but the vocabulary has ",
               n_candidates, " ordinary ids (BPE merges) to plant");
  }
  std::vector<int32_t> ids(static_cast<size_t>(n_candidates));
  std::iota(ids.begin(), ids.end(), first);
  // Fisher-Yates over the first `total` places only: the choice costs O(total) draws.
  const uint64_t key = tensor_key(seed, "synth.plant_cycles");
  for (int64_t i = 0; i < total; ++i) {
    const uint64_t j = static_cast<uint64_t>(i) + stream_word(key, static_cast<uint64_t>(i)) %
                                                      static_cast<uint64_t>(n_candidates - i);
    std::swap(ids[static_cast<size_t>(i)], ids[j]);
  }
  PlantedCycles out;
  size_t next = 0;
  for (int len : lengths) {
    out.cycles.emplace_back(ids.begin() + next, ids.begin() + next + len);
    next += static_cast<size_t>(len);
  }
  return out;
}

bool plant_touches(Role role) {
  return scales_block_output(role) || role == Role::kOutputResProj || role == Role::kLmHead;
}

Planter::Planter(const format::ModelConfig& config, uint64_t seed, PlantedCycles cycles)
    : hidden_(config.hidden_size), cycles_(std::move(cycles)) {
  const TensorSpec embed = embedding_tensor(config);
  const TensorSpec* final_norm = nullptr;
  const std::vector<TensorSpec> head = head_tensors(config);
  for (const TensorSpec& t : head) {
    if (t.role == Role::kFinalNorm) final_norm = &t;
  }
  if (final_norm == nullptr) base::fail("synth: the schema has no final norm to plant through");
  const size_t h = static_cast<size_t>(hidden_);
  const std::vector<float> w = bf16_values(*final_norm, seed, 0, h);
  for (const std::vector<int32_t>& cycle : cycles_.cycles) {
    for (size_t i = 0; i < cycle.size(); ++i) {
      const int32_t t = cycle[i], target = cycle[(i + 1) % cycle.size()];
      const std::vector<float> e = bf16_values(embed, seed, uint64_t(t) * h, h);
      double sum_sq = 0;
      for (float v : e) sum_sq += double(v) * v;
      const double rms = std::sqrt(sum_sq / double(h));
      const double gain = kPlantLogit / (double(h) * rms);
      std::vector<uint16_t> row(h);
      for (size_t j = 0; j < h; ++j) row[j] = float_to_bf16_bits(float(gain * e[j] / w[j]));
      head_rows_[target] = std::move(row);
    }
  }
}

void Planter::apply(const TensorSpec& t, uint64_t byte_begin, std::span<std::byte> out) const {
  if (scales_block_output(t.role)) {
    DF_ASSERT(t.dtype == format::DType::kBF16);
    for (size_t i = 0; i + 2 <= out.size(); i += 2) {
      uint16_t bits;
      std::memcpy(&bits, out.data() + i, 2);
      bits = float_to_bf16_bits(bf16_value(bits) * kPlantBlockScale);
      std::memcpy(out.data() + i, &bits, 2);
    }
  } else if (t.role == Role::kOutputResProj) {
    std::memset(out.data(), 0, out.size());  // BF16 +0: every source scores 0
  } else if (t.role == Role::kLmHead) {
    DF_ASSERT(t.dtype == format::DType::kBF16);
    const uint64_t row_bytes = uint64_t(hidden_) * 2, end = byte_begin + out.size();
    for (const auto& [target, row] : head_rows_) {
      const uint64_t row_begin = uint64_t(target) * row_bytes, row_end = row_begin + row_bytes;
      const uint64_t lo = std::max(row_begin, byte_begin), hi = std::min(row_end, end);
      if (lo >= hi) continue;
      std::memcpy(out.data() + (lo - byte_begin),
                  reinterpret_cast<const std::byte*>(row.data()) + (lo - row_begin), hi - lo);
    }
  }
}

std::string planted_cycles_json(const PlantedCycles& cycles) {
  nlohmann::ordered_json j = {{"cycles", cycles.cycles},
                              {"block_output_scale", kPlantBlockScale},
                              {"planted_logit", kPlantLogit}};
  return j.dump() + "\n";
}

}  // namespace deltafin::synth
