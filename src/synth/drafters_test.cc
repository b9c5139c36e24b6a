// Synthetic drafters: the published sizes at K3 scale, the published key sets, DSpark's embedding
// bit for bit the target's, and a well-formed byte-level BPE tokenizer.json.
#include "synth/drafters.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "format/drafter_dirs.h"
#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "synth/qwen_tokenizer.h"
#include "synth/synth.h"

namespace deltafin::synth {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
std::set<std::string> keys_of(const json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}
std::string fixture(const char* name) {
  return std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/drafter-configs/" + name;
}
uint64_t total_bytes(const std::vector<TensorSpec>& t) {
  uint64_t n = 0;
  for (const TensorSpec& s : t) n += s.nbytes();
  return n;
}

TEST(DSparkSynth, K3ScaleIsThePublishedCheckpoint) {
  const DSparkDims d = dspark_dims(k3_dims());
  const std::vector<TensorSpec> t = dspark_tensors(d);
  ASSERT_EQ(t.size(), 68u);
  EXPECT_EQ(total_bytes(t), 7124625922u);  // 3,562,312,961 BF16 parameters
  const std::map<std::string, std::vector<int64_t>> kShapes = {
      {"context_proj.weight", {7168, 35840}},
      {"layers.4.self_attn.q_b_proj.weight", {12288, 1536}},
      {"layers.0.self_attn.kv_a_proj_with_mqa.weight", {576, 7168}},
      {"layers.0.self_attn.kv_b_proj.weight", {16384, 512}},
      {"layers.2.self_attn.o_proj.weight", {7168, 8192}},
      {"markov_head.markov_w2.weight", {163840, 256}},
      {"confidence_head.proj.weight", {1, 7424}}};
  uint64_t embed = 0;
  for (const TensorSpec& s : t) {
    EXPECT_EQ(s.dtype, format::DType::kBF16) << s.name;
    if (s.name == "embed_tokens.weight") embed = s.nbytes();
    if (auto it = kShapes.find(s.name); it != kShapes.end()) {
      EXPECT_EQ(s.shape, it->second) << s.name;
    }
    EXPECT_EQ(s.name.find("lm_head"), std::string::npos);
  }
  EXPECT_EQ(total_bytes(t) - embed, 4775815682u);  // owned bytes without the embedding
  // The header is the published one's size too (7,520 bytes): same names, shapes and metadata.
  std::vector<format::TensorDecl> decls;
  for (const TensorSpec& s : t) decls.push_back({s.name, s.dtype, s.shape});
  EXPECT_EQ(format::safetensors_header_json(decls, {{"torchspec_version", "0.1.0"}}).size(), 7520u);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_LT(t[i - 1].name, t[i].name);
  const json c = json::parse(dspark_config_json(d));
  EXPECT_EQ(c["target_layer_ids"], json({2, 23, 47, 71, 89}));
  EXPECT_EQ(c["mask_token_id"], 163837);
  EXPECT_EQ(c["bos_token_id"], 163584);
  EXPECT_EQ(c["eos_token_id"], 163586);
  EXPECT_EQ(c["pad_token_id"], 163839);
  EXPECT_EQ(c["num_attention_heads"], 64);
  EXPECT_EQ(c["markov_rank"], 256);
  EXPECT_EQ(c["intermediate_size"], 14336);
  EXPECT_EQ(c["target_num_hidden_layers"], 93);
}

TEST(DSparkSynth, ConfigHasThePublishedKeySet) {
  const json oracle = json::parse(read_text(fixture("dspark-tiny-a.config.json")));
  for (const SynthDims& dims : {demo_dims(), k3_dims()}) {
    const json c = json::parse(dspark_config_json(dspark_dims(dims)));
    EXPECT_EQ(keys_of(c), keys_of(oracle));
    EXPECT_EQ(c["rope_parameters"], oracle["rope_parameters"]);
    EXPECT_FALSE(c.contains("hidden_act"));
  }
  // The demo has k3-tiny-a's layer structure (13 layers, blocks of 4): the oracle's taps.
  EXPECT_EQ(json::parse(dspark_config_json(dspark_dims(demo_dims())))["target_layer_ids"],
            oracle["target_layer_ids"]);
}

TEST(DSparkSynth, TargetLayersStayWithinTheTarget) {
  for (int n = 1; n <= 120; ++n) {
    const std::vector<int> ids = dspark_target_layer_ids(n, 12);
    ASSERT_EQ(ids.size(), static_cast<size_t>(std::min(n, 5))) << n;
    for (size_t j = 0; j < ids.size(); ++j) {
      EXPECT_GE(ids[j], 0) << n;
      EXPECT_LT(ids[j], n) << n;
      if (j > 0) {
        EXPECT_GT(ids[j], ids[j - 1]) << n;
      }
    }
  }
}

TEST(QwenSynth, K3ScaleIsTheBaseCheckpoints) {
  const std::vector<TensorSpec> small = qwen_tensors(qwen_dims(k3_dims(), QwenSize::k0_6b));
  const std::vector<TensorSpec> big = qwen_tensors(qwen_dims(k3_dims(), QwenSize::k1_7b));
  EXPECT_EQ(total_bytes(small), 2u * 596049920u);
  EXPECT_EQ(total_bytes(big), 2u * 1720574976u);
  EXPECT_EQ(small.size(), 28u * 11 + 2);
  // Headers of the published files' sizes (35,248 and 35,648 bytes), so the files are too
  // (1,192,135,096 and 3,441,185,608 bytes).
  for (const auto& [tensors, header] :
       {std::pair{&small, size_t{35248}}, std::pair{&big, size_t{35648}}}) {
    std::vector<format::TensorDecl> decls;
    for (const TensorSpec& s : *tensors) decls.push_back({s.name, s.dtype, s.shape});
    EXPECT_EQ(format::safetensors_header_json(decls, {{"format", "pt"}}).size(), header);
  }
  for (const TensorSpec& s : small) EXPECT_EQ(s.name.find("lm_head"), std::string::npos);
  const json oracle = json::parse(read_text(fixture("qwen3-tiny-a.config.json")));
  const json c = json::parse(qwen_config_json(qwen_dims(k3_dims(), QwenSize::k0_6b)));
  EXPECT_EQ(keys_of(c), keys_of(oracle));
  EXPECT_EQ(c["vocab_size"], 151936);
  EXPECT_EQ(c["eos_token_id"], 151643);
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["head_dim"], 128);
}

TEST(QwenSynth, TokenizerJsonIsByteLevelBpe) {
  for (int base : {640, 151643}) {
    const BpeVocab bpe = qwen_bpe(base);
    ASSERT_EQ(bpe.tokens.size(), static_cast<size_t>(base));
    const json t = json::parse(qwen_tokenizer_json(bpe));
    const json& vocab = t["model"]["vocab"];
    EXPECT_EQ(vocab.size(), static_cast<size_t>(base));  // every token's string is distinct
    EXPECT_EQ(vocab["Ġ"], 220);                          // GPT-2's byte order: space is rank 220
    EXPECT_EQ(vocab["!"], 0);
    // Every merge joins two tokens into a token, and merges come in vocabulary order.
    int last = 255;
    for (const json& m : t["model"]["merges"]) {
      const std::string a = m[0], b = m[1];
      ASSERT_TRUE(vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) << a << b;
      EXPECT_LT(vocab[a].get<int>(), vocab[a + b].get<int>());
      EXPECT_LT(vocab[b].get<int>(), vocab[a + b].get<int>());
      last = std::max(last, vocab[a + b].get<int>());
    }
    EXPECT_EQ(last, base - 1);
    ASSERT_EQ(t["added_tokens"].size(), 26u);
    EXPECT_EQ(t["added_tokens"][0]["content"], "<|endoftext|>");
    EXPECT_EQ(t["added_tokens"][0]["id"], base);
    EXPECT_EQ(t["normalizer"]["type"], "NFC");
    EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], kQwenPattern);
    EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
    EXPECT_EQ(t["decoder"]["type"], "ByteLevel");
  }
}

TEST(QwenSynth, PretokenizerSplitsLikeTheQwenRegex) {
  const std::vector<std::string_view> p = pretokenize_qwen_ascii("It's 2024, OK?  Yes\n\n  no");
  const std::vector<std::string_view> want = {"It",  "'s", " ", "2",    "0",    "2", "4",  ",",
                                              " OK", "?",  " ", " Yes", "\n\n", " ", " no"};
  EXPECT_EQ(p, want);
}

TEST(DrafterSynth, DemoFoldersAndTheBorrowedEmbedding) {
  const fs::path dir =
      fs::temp_directory_path() / ("df_synth_drafters_" + std::to_string(getpid()));
  fs::remove_all(dir);
  SynthOptions o;
  o.out_dir = dir.string();
  o.preset = "demo";
  o.layers = 2;
  o.experts = 4;
  o.seed = 7;
  const SynthReport r = synthesize(o);
  ASSERT_TRUE(r.drafters);
  const std::vector<format::DrafterDir> found = format::find_drafters(dir.string());
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].kind, format::DrafterKind::kDSpark);
  EXPECT_EQ(found[1].name, "qwen3-0.6b-base");
  // DSpark's embed_tokens equals the target's embedding, byte for byte.
  auto bytes_of = [](const std::string& path, const std::string& name) {
    for (const format::TensorInfo& t : format::read_safetensors_header(path)) {
      if (t.name != name) continue;
      std::ifstream in(path, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(t.offset));
      std::string b(t.nbytes, '\0');
      in.read(b.data(), static_cast<std::streamsize>(b.size()));
      return b;
    }
    return std::string();
  };
  const std::string k3 = bytes_of((dir / "model-00001-of-000001.safetensors").string(),
                                  "language_model.model.embed_tokens.weight");
  ASSERT_FALSE(k3.empty());
  EXPECT_EQ(bytes_of(found[0].path + "/model.safetensors", "embed_tokens.weight"), k3);
  const std::string header = read_text(found[0].path + "/model.safetensors").substr(8, 64);
  EXPECT_EQ(header.rfind(R"({"__metadata__":{"torchspec_version":"0.1.0"})", 0), 0u) << header;
  // --no-drafters removes an earlier run's drafters (their weights would be stale).
  o.drafters = false;
  synthesize(o);
  EXPECT_TRUE(format::find_drafters(dir.string()).empty());
  EXPECT_FALSE(fs::exists(dir / "drafters"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deltafin::synth
