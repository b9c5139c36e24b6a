// Unit tests for the expert manifest and the spine plan, on the k3-tiny-a fixture: the experts
// found from the remote headers must be the spans format::locate_experts finds in the checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "base/error.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/inventory.h"
#include "setup/expert_manifest.h"
#include "setup/spine.h"
#include "setup/testing/hf_test_server.h"

namespace deltafin::setup {
namespace {

const std::string kFixture = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";

struct Remote {
  format::ModelConfig config;
  std::vector<RemoteFile> files;
  std::vector<std::vector<format::TensorInfo>> shards;  // file = the shard's name
  std::vector<format::TensorInfo> all;
};

Remote load_fixture() {
  Remote r{format::load_config(kFixture), {}, {}, {}};
  for (const char* name :
       {"model-00001-of-000002.safetensors", "model-00002-of-000002.safetensors"}) {
    const std::string path = kFixture + "/" + name;
    std::vector<format::TensorInfo> t = format::read_safetensors_header(path);
    for (format::TensorInfo& x : t) x.file = name;
    r.files.push_back({name, std::filesystem::file_size(path), ""});
    r.all.insert(r.all.end(), t.begin(), t.end());
    r.shards.push_back(std::move(t));
  }
  return r;
}

TEST(ExpertManifest, MatchesTheCheckpointInventory) {
  const Remote r = load_fixture();
  const ExpertSplit split = split_experts(r.config, r.all, r.files);
  const auto ckpt = format::Checkpoint::open(kFixture);
  std::map<std::pair<int64_t, int64_t>, format::ExpertSpan> want;
  for (const format::ExpertSpan& s : format::locate_experts(ckpt, r.config))
    want[{s.layer, s.expert}] = s;
  ASSERT_EQ(static_cast<size_t>(split.manifest.n_experts()), want.size());
  for (const ExpertLayer& l : split.manifest.layers) {
    for (int64_t e = 0; e < l.n_experts(); ++e) {
      const format::ExpertSpan& s = want.at({l.layer, e});
      EXPECT_EQ(kFixture + "/" + split.manifest.files[l.file[e]].name, s.file);
      EXPECT_EQ(l.offset[e], s.offset);
      EXPECT_EQ(l.span_bytes, s.nbytes);
    }
    ASSERT_EQ(l.layout.size(), 6u);
    EXPECT_EQ(l.layout[0].suffix, "w1.weight_packed");
    EXPECT_EQ(l.layout[5].offset + l.layout[5].nbytes, l.span_bytes);
  }
  // Every expert tensor is marked, nothing else.
  size_t n_marked = std::count(split.is_expert.begin(), split.is_expert.end(), true);
  EXPECT_EQ(n_marked, want.size() * 6);
  for (size_t i = 0; i < r.all.size(); ++i)
    EXPECT_EQ(split.is_expert[i],
              r.all[i].name.find(".block_sparse_moe.experts.") != std::string::npos);
}

TEST(ExpertManifest, JsonRoundTripAndValidation) {
  const Remote r = load_fixture();
  const ExpertManifest m = split_experts(r.config, r.all, r.files).manifest;
  const ExpertManifest back = ExpertManifest::parse(m.to_json(), "experts.json");
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_EQ(back.total_bytes(), m.total_bytes());
  EXPECT_EQ(back.find_layer(0), nullptr);  // the dense layer
  ASSERT_NE(back.find_layer(1), nullptr);
  std::string bad = m.to_json();
  bad.replace(bad.find("\"span_bytes\":"), 14, "\"span_bytes\":9");
  EXPECT_THROW(ExpertManifest::parse(bad, "x"), base::Error);
  EXPECT_THROW(ExpertManifest::parse("{\"format\":\"other\"}", "x"), base::Error);
  EXPECT_THROW(ExpertManifest::parse("not json", "x"), base::Error);
}

TEST(ExpertManifest, RefusesSplitOrMissingExperts) {
  Remote r = load_fixture();
  // Move w2.weight_packed of layer 1 expert 3 so that it no longer follows w1.weight_scale.
  const std::string victim =
      "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight_packed";
  auto it =
      std::find_if(r.all.begin(), r.all.end(), [&](const auto& t) { return t.name == victim; });
  ASSERT_NE(it, r.all.end());
  it->offset += 1;
  try {
    split_experts(r.config, r.all, r.files);
    FAIL() << "a split expert was accepted";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 expert 3"), std::string::npos) << e.what();
  }
  r.all.erase(it);
  EXPECT_THROW(split_experts(r.config, r.all, r.files), base::Error);
}

TEST(Spine, PlanCoalescesAndOrders) {
  const Remote r = load_fixture();
  const ExpertSplit split = split_experts(r.config, r.all, r.files);
  std::set<std::string> experts;
  for (size_t i = 0; i < r.all.size(); ++i)
    if (split.is_expert[i]) experts.insert(r.all[i].name);
  const auto plan =
      plan_spine(r.shards, [&](const format::TensorInfo& t) { return !experts.count(t.name); });
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].name, "spine-00001-of-00002.safetensors");
  size_t n = 0;
  for (const SpineShard& s : plan) {
    n += s.tensor_names.size();
    uint64_t pos = s.prefix.size();
    for (const SpineRun& run : s.runs) {  // back to back locally, and one request per remote run
      EXPECT_EQ(run.local_offset, pos);
      pos += run.nbytes;
    }
    EXPECT_EQ(pos, s.file_bytes);
    for (size_t i = 1; i < s.runs.size(); ++i)
      EXPECT_NE(s.runs[i - 1].remote_offset + s.runs[i - 1].nbytes, s.runs[i].remote_offset);
    // The header parses back to the same tensors, in the remote order.
    const auto back = format::parse_safetensors_header(s.prefix, s.file_bytes, s.name);
    ASSERT_EQ(back.size(), s.tensor_names.size());
    for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i].name, s.tensor_names[i]);
  }
  EXPECT_EQ(n, r.all.size() - experts.size());
  const std::string index = spine_index_json(plan, r.shards);
  EXPECT_EQ(format::parse_shard_index(index, "index").entries.size(), n);
}

}  // namespace
}  // namespace deltafin::setup
