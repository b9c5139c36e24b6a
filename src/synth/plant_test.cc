// Planted cycles: the cycles chosen, every rewritten tensor against its plain values, the greedy
// map that lm_head gives on an embedding-dominated output, and a planted synth run whose files
// differ from a plain one in values only.
#include "synth/plant.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "synth/model_files.h"
#include "synth/random.h"
#include "synth/synth.h"
#include "synth/weights.h"

namespace deltafin::synth {
namespace {

namespace fs = std::filesystem;
using format::Role;

float bf16(uint16_t bits) {
  const uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> as_floats(const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    out[i] = bf16(bits);
  }
  return out;
}

std::vector<std::byte> plain_bytes(const TensorSpec& t, uint64_t seed) {
  std::vector<std::byte> out(t.nbytes());
  fill_tensor_bytes(t, tensor_key(seed, t.name), 0, out);
  return out;
}

std::vector<std::byte> planted_bytes(const TensorSpec& t, uint64_t seed, const Planter& p,
                                     size_t chunk) {
  std::vector<std::byte> out(t.nbytes());
  for (size_t pos = 0; pos < out.size(); pos += chunk) {
    const std::span<std::byte> part =
        std::span(out).subspan(pos, std::min(chunk, out.size() - pos));
    fill_tensor_bytes(t, tensor_key(seed, t.name), pos, part);
    if (plant_touches(t.role)) p.apply(t, pos, part);
  }
  return out;
}

TEST(PlantCycles, ParsesLengths) {
  EXPECT_EQ(parse_cycle_lengths("4,64"), (std::vector<int>{4, 64}));
  EXPECT_EQ(parse_cycle_lengths("7"), (std::vector<int>{7}));
  for (const char* bad : {"", "4,", ",4", "0", "4,-1", "a", " 4", "4;64", "99999999999"}) {
    EXPECT_THROW(parse_cycle_lengths(bad), base::Error) << bad;
  }
}

TEST(PlantCycles, ChoosesDistinctOrdinaryIdsPerSeed) {
  const int base_vocab = demo_dims().base_vocab;
  const PlantedCycles a = choose_cycles({4, 64}, base_vocab, 3);
  ASSERT_EQ(a.cycles.size(), 2u);
  EXPECT_EQ(a.cycles[0].size(), 4u);
  EXPECT_EQ(a.cycles[1].size(), 64u);
  std::set<int32_t> seen;
  for (const auto& c : a.cycles) {
    for (size_t i = 0; i < c.size(); ++i) {
      EXPECT_GE(c[i], 256);         // no single bytes
      EXPECT_LT(c[i], base_vocab);  // no reserved or special ids
      EXPECT_TRUE(seen.insert(c[i]).second) << c[i];
      EXPECT_EQ(a.next(c[i]), c[(i + 1) % c.size()]);
    }
  }
  EXPECT_EQ(a.next(5), -1);
  EXPECT_EQ(choose_cycles({4, 64}, base_vocab, 3).cycles, a.cycles);
  EXPECT_NE(choose_cycles({4, 64}, base_vocab, 4).cycles, a.cycles);
  // The choice uses every candidate: all 512 merges of the demo vocabulary fit, one more does not.
  const PlantedCycles all = choose_cycles({512}, base_vocab, 0);
  EXPECT_EQ(std::set<int32_t>(all.cycles[0].begin(), all.cycles[0].end()).size(), 512u);
  EXPECT_THROW(choose_cycles({256, 257}, base_vocab, 0), base::Error);
}

// Every tensor of a demo model: the block outputs are exactly 1/16 of their plain values, the
// output AttnRes projection is zero, lm_head differs only in the planted rows, the rest is
// untouched; chunk boundaries (here every 252 bytes, mid-row) change nothing.
TEST(PlantCycles, RewritesExactlyTheTensorsItNames) {
  const format::ModelConfig c = synth_config(demo_dims());
  const uint64_t seed = 11;
  const Planter planter(c, seed, choose_cycles({4, 64}, demo_dims().base_vocab, seed));
  std::vector<TensorSpec> all = head_tensors(c);
  all.push_back(embedding_tensor(c));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (const TensorSpec& t : layer_tensors(c, l)) {
      // The spine, and of the routed experts (untouched) only expert 0.
      if (t.name.find(".experts.") == std::string::npos ||
          t.name.find(".experts.0.") != std::string::npos)
        all.push_back(t);
    }
  }
  std::set<Role> scaled;
  int n_head_rows = 0;
  for (const TensorSpec& t : all) {
    const std::vector<std::byte> plain = plain_bytes(t, seed);
    const std::vector<std::byte> planted = planted_bytes(t, seed, planter, 252);
    ASSERT_EQ(planted.size(), plain.size());
    EXPECT_EQ(planted_bytes(t, seed, planter, planted.size()), planted) << t.name;
    if (!plant_touches(t.role)) {
      EXPECT_EQ(planted, plain) << t.name;
    } else if (t.role == Role::kOutputResProj) {
      EXPECT_TRUE(std::all_of(planted.begin(), planted.end(),
                              [](std::byte b) { return b == std::byte{0}; }));
    } else if (t.role == Role::kLmHead) {
      const size_t h = static_cast<size_t>(c.hidden_size);
      const std::vector<float> p = as_floats(planted), q = as_floats(plain);
      for (size_t row = 0; row < p.size() / h; ++row) {
        const bool is_target = planter.cycles().next(static_cast<int32_t>(row)) >= 0;
        if (is_target) {
          const std::vector<uint16_t>& want = planter.head_row(static_cast<int32_t>(row));
          ASSERT_EQ(std::memcmp(planted.data() + row * h * 2, want.data(), h * 2), 0) << row;
          ++n_head_rows;
        } else {
          ASSERT_TRUE(
              std::equal(p.begin() + row * h, p.begin() + (row + 1) * h, q.begin() + row * h))
              << row;
        }
      }
    } else {
      scaled.insert(t.role);
      const std::vector<float> p = as_floats(planted), q = as_floats(plain);
      for (size_t i = 0; i < p.size(); ++i) ASSERT_EQ(p[i], q[i] * kPlantBlockScale) << t.name;
    }
  }
  EXPECT_EQ(n_head_rows, 68);
  // Every writer into the residual stream of this model: KDA and MLA o_proj, the dense layer's
  // down_proj, the shared experts' down_proj, the latent MoE's up-projection.
  EXPECT_EQ(scaled, (std::set<Role>{Role::kKdaOProj, Role::kMlaOProj, Role::kMlpDown,
                                    Role::kSharedDown, Role::kLatentUp}));
}

// The construction the map rests on: with the output mix a multiple of embed(t) (the block outputs
// negligible), RMSNorm then lm_head give pi(t) a logit of kPlantLogit, far above every other id;
// a perturbation of the mix a third of the embedding's size (more than the scaled blocks add)
// keeps it on top. Run at the demo's hidden size and at K3's.
TEST(PlantCycles, LmHeadMapsEachPlantedEmbeddingToItsSuccessor) {
  for (const SynthDims& dims : {demo_dims(), k3_dims()}) {
    format::ModelConfig c = synth_config(dims);
    const size_t h = static_cast<size_t>(c.hidden_size);
    const int64_t vocab = dims.base_vocab + kReservedTokens;
    // At K3's size only the planted rows and a sample of the others are read: the full lm_head
    // is 2.3 GB.
    const uint64_t seed = 2;
    const Planter planter(c, seed, choose_cycles({4, 12}, dims.base_vocab, seed));
    TensorSpec head;
    TensorSpec norm;
    for (const TensorSpec& t : head_tensors(c)) {
      if (t.role == Role::kLmHead) head = t;
      if (t.role == Role::kFinalNorm) norm = t;
    }
    const std::vector<float> w = as_floats(plain_bytes(norm, seed));
    std::set<int64_t> row_set;
    const int64_t stride = std::max<int64_t>(1, vocab / 2048);
    for (int64_t r = 0; r < vocab; r += stride) row_set.insert(r);
    for (const auto& cyc : planter.cycles().cycles) row_set.insert(cyc.begin(), cyc.end());
    const std::vector<int64_t> rows(row_set.begin(), row_set.end());
    std::vector<std::vector<float>> head_rows;
    for (int64_t r : rows) {
      std::vector<std::byte> bytes(h * 2);
      fill_tensor_bytes(head, tensor_key(seed, head.name), uint64_t(r) * h * 2, bytes);
      planter.apply(head, uint64_t(r) * h * 2, bytes);
      head_rows.push_back(as_floats(bytes));
    }
    const TensorSpec embed = embedding_tensor(c);
    for (const auto& cyc : planter.cycles().cycles) {
      for (int32_t t : cyc) {
        std::vector<std::byte> bytes(h * 2);
        fill_tensor_bytes(embed, tensor_key(seed, embed.name), uint64_t(t) * h * 2, bytes);
        const std::vector<float> e = as_floats(bytes);
        for (double noise : {0.0, 1.0 / 3}) {
          // out = 0.2 e_t + noise * 0.2 * (another id's embedding), then the final RMSNorm.
          std::vector<std::byte> other_bytes(h * 2);
          fill_tensor_bytes(embed, tensor_key(seed, embed.name), uint64_t(t + 1) * h * 2,
                            other_bytes);
          const std::vector<float> o = as_floats(other_bytes);
          std::vector<double> x(h);
          double ss = 0;
          for (size_t j = 0; j < h; ++j) {
            x[j] = 0.2 * e[j] + noise * 0.2 * o[j];
            ss += x[j] * x[j];
          }
          const double inv = 1.0 / std::sqrt(ss / double(h) + c.rms_norm_eps);
          for (size_t j = 0; j < h; ++j) x[j] *= inv * w[j];
          double best = -1e30, second = -1e30, planted = 0;
          int64_t best_row = -1;
          for (size_t k = 0; k < rows.size(); ++k) {
            double logit = 0;
            for (size_t j = 0; j < h; ++j) logit += head_rows[k][j] * x[j];
            if (rows[k] == planter.cycles().next(t)) planted = logit;
            if (logit > best) {
              second = best;
              best = logit;
              best_row = rows[k];
            } else if (logit > second) {
              second = logit;
            }
          }
          EXPECT_EQ(best_row, planter.cycles().next(t)) << "hidden " << h << " id " << t;
          if (noise == 0.0) {
            EXPECT_NEAR(planted, kPlantLogit, 0.01 * kPlantLogit);
          }
          EXPECT_GT(best - second, 0.4 * kPlantLogit) << "hidden " << h << " id " << t;
        }
      }
    }
  }
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A planted run writes the map and files of exactly the plain run's layout: same names, same
// sizes, same headers; a later run without planting removes the map.
TEST(PlantCycles, PlantedRunChangesValuesOnly) {
  const fs::path dir =
      fs::temp_directory_path() / ("deltafin_plant_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  SynthOptions o;
  o.preset = "demo";
  o.layers = 5;
  o.experts = 8;
  o.seed = 4;
  o.drafters = false;
  o.out_dir = (dir / "plain").string();
  const SynthReport plain = synthesize(o);
  o.out_dir = (dir / "planted").string();
  o.plant_cycles = {4, 64};
  const SynthReport planted = synthesize(o);
  EXPECT_TRUE(plain.planted.empty());
  EXPECT_EQ(planted.planted.cycles, choose_cycles({4, 64}, demo_dims().base_vocab, 4).cycles);
  EXPECT_EQ(planted.file_bytes, plain.file_bytes);
  EXPECT_EQ(planted.tensor_bytes, plain.tensor_bytes);

  const auto json = nlohmann::json::parse(read_text(dir / "planted" / "planted_cycles.json"));
  EXPECT_EQ(json["cycles"].get<std::vector<std::vector<int32_t>>>(), planted.planted.cycles);
  EXPECT_FALSE(fs::exists(dir / "plain" / "planted_cycles.json"));
  int n_shards = 0;
  for (const auto& entry : fs::directory_iterator(dir / "plain")) {
    const std::string name = entry.path().filename().string();
    const std::string a = read_text(entry.path()), b = read_text(dir / "planted" / name);
    ASSERT_EQ(a.size(), b.size()) << name;
    if (!name.ends_with(".safetensors")) {
      EXPECT_EQ(a, b) << name;  // config, tokenizer, index
      continue;
    }
    uint64_t header = 0;
    std::memcpy(&header, a.data(), 8);
    EXPECT_EQ(a.substr(0, 8 + header), b.substr(0, 8 + header)) << name;
    EXPECT_NE(a, b) << name;  // every shard holds block outputs
    ++n_shards;
  }
  EXPECT_EQ(n_shards, 2);

  o.plant_cycles.clear();
  synthesize(o);
  EXPECT_FALSE(fs::exists(dir / "planted" / "planted_cycles.json"));
  EXPECT_EQ(read_text(dir / "planted" / "model-00001-of-000002.safetensors"),
            read_text(dir / "plain" / "model-00001-of-000002.safetensors"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltafin::synth
