// The streamed spine and the streaming expert store on k3-tiny-a: every mix of resident (read
// into our own memory) and streamed layers, lm_head moved there too, with and without the
// lookahead, gives logits bit-identical to the mapped model (verify passes too); the spine reads
// cover exactly the tensors the plan uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "experts/streaming_expert_store.h"
#include "model/model.h"
#include "model/streamed_spine.h"

namespace deltafin::model {
namespace {

const std::string kModel = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";
const std::vector<int32_t> kPrompt = {488, 250, 115, 269, 384, 67, 152, 153, 398, 289, 199, 395};

// Logits of the prompt in chunks of 5, then 4 decode steps.
std::vector<float> run(Model& m) {
  const int64_t vocab = m.config().vocab_size;
  SequenceState st = m.new_state();
  std::vector<float> out(kPrompt.size() * vocab), step(vocab);
  for (size_t b = 0; b < kPrompt.size(); b += 5) {
    const size_t len = std::min<size_t>(5, kPrompt.size() - b);
    m.forward(st, std::span(kPrompt).subspan(b, len), true, out.data() + b * vocab);
  }
  int32_t id = 7;
  ForwardOptions decode;
  decode.kind = PassKind::kDecode;
  for (int i = 0; i < 4; ++i) {
    m.forward(st, std::span(&id, 1), false, step.data(), decode);
    out.insert(out.end(), step.begin(), step.end());
    id = static_cast<int32_t>(std::max_element(step.begin(), step.end()) - step.begin());
  }
  return out;
}

bool identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SpineReads, CoverEveryTensorOfTheLayerPlanOnce) {
  std::unique_ptr<Model> m = Model::load(kModel);
  const std::vector<SpineLayerReads> reads = spine_layer_reads(m->plan(), m->checkpoint());
  ASSERT_EQ(reads.size(), m->plan().layers.size());
  for (size_t l = 0; l < reads.size(); ++l) {
    const SpineLayerReads& r = reads[l];
    EXPECT_FALSE(r.runs.empty());
    EXPECT_GE(r.read_bytes, r.tensor_bytes);
    EXPECT_EQ(r.read_bytes % 4096, 0u);
    // The layer plan's tensors, found by name: every tensor of the layer but the routed experts
    // (the expert store reads those).
    const std::string layer = ".layers." + std::to_string(l) + ".";
    std::set<std::string> want, got;
    for (const format::TensorInfo& t : m->checkpoint().tensors()) {
      if (t.name.find(layer) != std::string::npos && t.name.find(".experts.") == std::string::npos)
        want.insert(t.name);
    }
    std::vector<std::pair<size_t, size_t>> placed;  // [begin, end) in the buffer
    uint64_t bytes = 0;
    for (const auto& [tensor, offset] : r.tensor_offset) {
      got.insert(tensor->name);
      EXPECT_LE(offset + tensor->nbytes, r.read_bytes) << tensor->name;
      placed.emplace_back(offset, offset + tensor->nbytes);
      bytes += tensor->nbytes;
    }
    EXPECT_EQ(got, want) << "layer " << l;
    EXPECT_EQ(bytes, r.tensor_bytes) << "layer " << l;
    std::sort(placed.begin(), placed.end());
    for (size_t i = 1; i < placed.size(); ++i)
      EXPECT_LE(placed[i - 1].second, placed[i].first) << "layer " << l << ": tensors overlap";
  }
  const auto globals = global_spine_tensors(m->plan(), m->checkpoint());
  bool has_lm_head = false;
  for (const format::TensorInfo* t : globals) {
    EXPECT_EQ(t->name.find("embed_tokens"), std::string::npos);
    has_lm_head |= t->name.find("lm_head") != std::string::npos;
  }
  EXPECT_TRUE(has_lm_head);
}

struct Case {
  int resident_every;  // 0: every layer streamed; k: layers l % k == 0 resident
  int slots;
  bool lookahead;
};

class StreamedModel : public ::testing::TestWithParam<Case> {};

// k3-tiny-a with its spine streamed or resident as `c` says and its experts streamed.
struct Streamed {
  std::shared_ptr<io::ReadScheduler> scheduler = std::make_shared<io::ReadScheduler>(3);
  std::vector<bool> resident;
  StreamedSpine* spine = nullptr;
  std::unique_ptr<Model> model;
};

Streamed build_streamed(const Case& c) {
  Streamed s;
  s.model = Model::build(
      kModel, std::nullopt,
      [&](const ModelPlan& plan, const format::Checkpoint& ckpt,
          const experts::ExpertCatalog& catalog) {
        const size_t n = plan.layers.size();
        s.resident.assign(n, false);
        for (size_t l = 0; l < n && c.resident_every > 0; ++l)
          s.resident[l] = l % c.resident_every == 0;
        ModelStores stores;
        stores.spine_globals = global_spine_tensors(plan, ckpt);
        stores.spine =
            std::make_unique<StreamedSpine>(plan, ckpt, spine_layer_reads(plan, ckpt), s.resident,
                                            stores.spine_globals, s.scheduler);
        s.spine = stores.spine.get();
        stores.experts = std::make_unique<experts::StreamingExpertStore>(
            catalog, s.scheduler,
            experts::StreamingStoreOptions{.n_slots = c.slots, .max_prefetch_slots = 4});
        stores.lookahead = c.lookahead;
        return stores;
      });
  return s;
}

TEST_P(StreamedModel, LogitsAreBitIdenticalToTheMappedModel) {
  const Case c = GetParam();
  std::unique_ptr<Model> ref = Model::load(kModel);
  const std::vector<float> want = run(*ref);

  Streamed streamed = build_streamed(c);
  std::unique_ptr<Model>& m = streamed.model;
  const std::vector<bool>& resident = streamed.resident;
  StreamedSpine* spine_ptr = streamed.spine;
  // The lm_head is used from the spine's copy of its bytes.
  EXPECT_NE(m->plan().lm_head.data, ref->plan().lm_head.data);
  EXPECT_EQ(
      std::memcmp(m->plan().lm_head.data, ref->plan().lm_head.data, m->plan().lm_head.nbytes()), 0);

  EXPECT_TRUE(identical(run(*m), want));
  const SpineStats s = spine_ptr->stats();
  size_t n_streamed = 0;
  for (bool r : resident) n_streamed += !r;
  // 3 prefill chunks + 4 decode steps, each streamed layer once per pass (plus at most the
  // read-ahead of the next pass's first layer).
  EXPECT_GE(s.layers_read, 7 * n_streamed);
  EXPECT_LE(s.layers_read, 7 * n_streamed + 1);
  EXPECT_EQ(s.passes, 7u);
  const experts::ExpertStoreStats e = m->expert_store().stats();
  EXPECT_GT(e.bytes_read, 0u);
  if (c.lookahead) {
    EXPECT_GT(e.predicted_actual, 0u);
  } else {
    EXPECT_EQ(e.prefetch_reads, 0u);
  }
  // Running again reuses the buffers and the cache and still matches.
  EXPECT_TRUE(identical(run(*m), want));
}

// A verify pass through streamed stores, with the lookahead guessing the union of its rows'
// routes, gives the mapped model's decode steps bit for bit, and so does decoding after a commit.
TEST(StreamedModelVerify, EqualsMappedDecodeStepsWithTheLookahead) {
  std::unique_ptr<Model> ref = Model::load(kModel);
  Streamed streamed = build_streamed(Case{0, 5, true});
  Model& m = *streamed.model;
  const int64_t vocab = m.config().vocab_size;
  constexpr int64_t kPrefill = 6, kWidth = 4, kKeep = 2;
  ForwardOptions prefill, decode, verify;
  decode.kind = PassKind::kDecode;
  verify.kind = PassKind::kVerify;
  std::vector<float> last(vocab);
  SequenceState plain = ref->new_state(), spec = m.new_state();
  ref->forward(plain, std::span(kPrompt).first(kPrefill), false, last.data(), prefill);
  m.forward(spec, std::span(kPrompt).first(kPrefill), false, last.data(), prefill);
  // The mapped model's decode steps over the next kWidth ids, then two more after kKeep of them.
  std::vector<float> want(kWidth * vocab), got(kWidth * vocab);
  SequenceState after_keep;
  for (int64_t r = 0; r < kWidth; ++r) {
    if (r == kKeep) after_keep = plain;
    ref->forward(plain, std::span(kPrompt).subspan(kPrefill + r, 1), false, want.data() + r * vocab,
                 decode);
  }
  m.forward(spec, std::span(kPrompt).subspan(kPrefill, kWidth), true, got.data(), verify);
  EXPECT_TRUE(identical(got, want));
  EXPECT_GT(m.expert_store().stats().predicted_actual, 0u);
  m.commit(spec, kKeep);
  std::vector<float> want_next(2 * vocab), got_next(2 * vocab);
  for (int64_t r = 0; r < 2; ++r) {
    const auto id = std::span(kPrompt).subspan(kPrefill + kWidth + r, 1);
    ref->forward(after_keep, id, false, want_next.data() + r * vocab, decode);
    m.forward(spec, id, false, got_next.data() + r * vocab, decode);
  }
  EXPECT_TRUE(identical(got_next, want_next));
}

INSTANTIATE_TEST_SUITE_P(Mixes, StreamedModel,
                         ::testing::Values(Case{0, 2, false}, Case{0, 8, true}, Case{3, 5, true},
                                           Case{2, 64, false}));

}  // namespace
}  // namespace deltafin::model
