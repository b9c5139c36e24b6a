// End-to-end tests of a synth run: the folder loads in the engine's own checkpoint reader with
// nothing missing or misplaced, runs are byte-identical per seed, and values do not depend on how
// tensors are cut into chunks.
#include "synth/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/inventory.h"
#include "format/schema.h"
#include "synth/model_files.h"
#include "synth/random.h"
#include "synth/weights.h"

namespace deltafin::synth {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deltafin_synth_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  SynthReport run(const std::string& sub, uint64_t seed) {
    SynthOptions o;
    o.out_dir = (dir_ / sub).string();
    o.preset = "demo";
    o.layers = 5;
    o.experts = 8;
    o.seed = seed;
    return synthesize(o);
  }
  fs::path dir_;
};

TEST_F(SynthTest, LoadsInTheEngineReaderComplete) {
  const SynthReport r = run("a", 7);
  EXPECT_EQ(r.n_shards, 2);
  const auto checkpoint = format::Checkpoint::open((dir_ / "a").string());
  const auto config = format::load_config((dir_ / "a").string());
  const auto problems = format::check_inventory(checkpoint, config);
  for (const auto& p : problems) ADD_FAILURE() << p.message;
  uint64_t data_bytes = 0;
  for (const auto& t : checkpoint.tensors()) data_bytes += t.nbytes;
  EXPECT_EQ(data_bytes, r.tensor_bytes);

  // Each layer's experts: one run in one shard, every expert back to back.
  const auto spans = format::locate_experts(checkpoint, config);
  ASSERT_EQ(spans.size(), 4u * 8);
  std::map<int64_t, std::vector<const format::ExpertSpan*>> by_layer;
  for (const auto& s : spans) by_layer[s.layer].push_back(&s);
  for (auto& [layer, v] : by_layer) {
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < v.size(); ++i) {
      EXPECT_EQ(v[i]->file, v[0]->file) << "layer " << layer;
      EXPECT_EQ(v[i]->offset, v[i - 1]->offset + v[i - 1]->nbytes) << "layer " << layer;
    }
    EXPECT_EQ(v[0]->nbytes, format::expert_span_bytes(r.config));
  }
}

TEST_F(SynthTest, SameSeedSameBytesOtherSeedOtherWeights) {
  run("a", 7);
  run("b", 7);
  run("c", 8);
  size_t n_files = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "a")) {
    if (!entry.is_regular_file()) continue;  // drafters/ is compared below
    const std::string name = entry.path().filename().string();
    const std::string a = read_text(entry.path());
    EXPECT_EQ(a, read_text(dir_ / "b" / name)) << name;
    if (name.ends_with(".safetensors")) {
      EXPECT_NE(a, read_text(dir_ / "c" / name)) << name;
    }
    ++n_files;
  }
  EXPECT_EQ(n_files, 4u + 2 + 1);  // config, generation, tokenizer x2, shards, index
  for (const char* f :
       {"drafters/dspark/model.safetensors", "drafters/dspark/config.json",
        "drafters/qwen3-0.6b-base/model.safetensors", "drafters/qwen3-0.6b-base/tokenizer.json"}) {
    const std::string a = read_text(dir_ / "a" / f);
    ASSERT_FALSE(a.empty()) << f;
    EXPECT_EQ(a, read_text(dir_ / "b" / f)) << f;
    if (std::string(f).ends_with(".safetensors")) {
      EXPECT_NE(a, read_text(dir_ / "c" / f)) << f;
    }
  }
}

TEST_F(SynthTest, RerunReplacesEarlierShards) {
  SynthOptions o;
  o.out_dir = (dir_ / "a").string();
  o.preset = "demo";
  o.layers = 9;
  o.experts = 8;
  synthesize(o);
  EXPECT_TRUE(fs::exists(dir_ / "a" / "model-00003-of-000003.safetensors"));
  run("a", 1);
  EXPECT_FALSE(fs::exists(dir_ / "a" / "model-00003-of-000003.safetensors"));
  EXPECT_NO_THROW(format::Checkpoint::open((dir_ / "a").string()));
}

TEST(SynthOptions, PresetsAndLimits) {
  SynthOptions o;
  o.preset = "k3-scale";
  o.layers = 2;
  o.experts = 4;
  const SynthDims d = resolve_dims(o);
  EXPECT_EQ(d.hidden_size, 7168);
  EXPECT_EQ(d.vocab_size(), 163840);
  EXPECT_EQ(d.num_experts_per_token, 4);  // top-16 capped at the expert count
  o.preset = "huge";
  EXPECT_THROW(resolve_dims(o), base::Error);
}

TEST(Weights, ChunkingDoesNotChangeValues) {
  const format::ModelConfig c = synth_config(demo_dims());
  for (const TensorSpec& t : layer_tensors(c, 1)) {
    if (t.nbytes() > 40000) continue;  // every init kind has small tensors here
    const uint64_t key = tensor_key(5, t.name);
    std::vector<std::byte> whole(t.nbytes()), pieces(t.nbytes());
    fill_tensor_bytes(t, key, 0, whole);
    const size_t step = 4 * 3;  // not a multiple of 8: exercises partial stream words
    for (size_t pos = 0; pos < pieces.size(); pos += step) {
      const size_t n = std::min(step, pieces.size() - pos);
      fill_tensor_bytes(t, key, pos, std::span(pieces).subspan(pos, n));
    }
    EXPECT_EQ(whole, pieces) << t.name;
  }
}

TEST(Weights, ValuesHaveTheirIntendedRanges) {
  const format::ModelConfig c = synth_config(demo_dims());
  for (const TensorSpec& t : layer_tensors(c, 1)) {
    std::vector<std::byte> bytes(t.nbytes());
    fill_tensor_bytes(t, tensor_key(1, t.name), 0, bytes);
    if (t.init == Init::kScaleBytes) {
      for (std::byte b : bytes) {
        ASSERT_GE(uint8_t(b), t.scale_lo) << t.name;
        ASSERT_LE(uint8_t(b), t.scale_hi) << t.name;
      }
    } else if (t.init == Init::kALog) {
      std::vector<float> v(t.shape[0]);
      std::memcpy(v.data(), bytes.data(), bytes.size());
      for (int i = 0; i < t.shape[0]; ++i) {
        if (i < t.n_valid) {
          EXPECT_TRUE(v[i] >= 0.0f && v[i] < std::log(16.0f)) << i;
        } else {
          EXPECT_EQ(v[i], 0.0f) << i;
        }
      }
    } else if (t.init == Init::kUniform && t.dtype == format::DType::kBF16 &&
               bytes.size() > 20000) {
      double sum_sq = 0;
      const size_t n = bytes.size() / 2;
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        const uint32_t u = uint32_t(h) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        sum_sq += double(f) * f;
      }
      EXPECT_NEAR(std::sqrt(sum_sq / n) / t.std, 1.0, 0.05) << t.name;
    }
  }
}

}  // namespace
}  // namespace deltafin::synth
