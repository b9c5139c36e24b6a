// Qwen3 dense on the qwen3-tiny-a oracle (tests/fixtures/qwen3-tiny-a/README.md): prompt logits
// and the cached greedy continuation against transformers in float64; verify passes equal decode
// steps bit for bit, commit(keep) leaves the cache keep decode steps leave, and two sequence
// states on one model stay independent (a drafter's own sequence beside another).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "model/model.h"
#include "testing/reference_tensor.h"

namespace deltafin::model {
namespace {

const std::string kDir = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/qwen3-tiny-a";
constexpr double kBound = 5e-4;  // of max|reference logit|, at every position (the oracle bound)

// One tensor of reference.safetensors as doubles (F64 logits, I32 ids).
std::vector<double> reference(const std::string& name) {
  return testing::read_reference_tensor(kDir + "/reference.safetensors", name);
}

std::vector<int32_t> reference_ids(const std::string& name) {
  const std::vector<double> v = reference(name);
  return std::vector<int32_t>(v.begin(), v.end());
}

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

// Every row within kBound · max|want| of the reference, and the same argmax.
void expect_oracle(const std::vector<float>& got, const std::vector<double>& want, int64_t vocab,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t r = 0; r < got.size() / vocab; ++r) {
    double err = 0.0;
    for (int64_t i = 0; i < vocab; ++i)
      err = std::max(err, std::abs(got[r * vocab + i] - want[r * vocab + i]));
    EXPECT_LT(err / scale, kBound) << what << " position " << r;
    const auto ref_max = std::max_element(want.begin() + r * vocab, want.begin() + (r + 1) * vocab);
    EXPECT_EQ(argmax(got.data() + r * vocab, vocab), ref_max - (want.begin() + r * vocab))
        << what << " position " << r;
  }
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_same_state(const SequenceState& a, const SequenceState& b, const std::string& what) {
  ASSERT_EQ(a.n_positions, b.n_positions) << what;
  EXPECT_EQ(a.tentative_rows, b.tentative_rows) << what;
  ASSERT_EQ(a.gqa.size(), b.gqa.size());
  for (size_t l = 0; l < a.gqa.size(); ++l) {
    EXPECT_EQ(a.gqa[l].n_positions, a.n_positions) << what << ": GQA layer " << l;
    EXPECT_EQ(a.gqa[l].n_positions, b.gqa[l].n_positions) << what << ": GQA layer " << l;
    EXPECT_TRUE(same_bytes(a.gqa[l].k, b.gqa[l].k)) << what << ": keys of layer " << l;
    EXPECT_TRUE(same_bytes(a.gqa[l].v, b.gqa[l].v)) << what << ": values of layer " << l;
  }
}

ForwardOptions pass(PassKind kind) {
  ForwardOptions o;
  o.kind = kind;
  return o;
}

struct Qwen3 : ::testing::Test {
  std::unique_ptr<Model> m = Model::load(kDir);
  int64_t vocab = m->config().vocab_size;
  std::vector<int32_t> prompt = reference_ids("prompt_ids");
  std::vector<int32_t> greedy = reference_ids("greedy_ids");
  // The prompt, then the greedy continuation: the rows the verify tests decode or verify.
  std::vector<int32_t> ids = [this] {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), greedy.begin(), greedy.end());
    return all;
  }();
  static constexpr int64_t kPrefill = 8;

  SequenceState prefilled() {
    SequenceState st = m->new_state();
    std::vector<float> logits(vocab);
    m->forward(st, std::span(ids).first(kPrefill), false, logits.data(), pass(PassKind::kPrefill));
    return st;
  }
  std::vector<float> decode(SequenceState& st, int64_t from, int64_t n) {
    std::vector<float> out(n * vocab);
    for (int64_t r = 0; r < n; ++r)
      m->forward(st, std::span(ids).subspan(from + r, 1), false, out.data() + r * vocab,
                 pass(PassKind::kDecode));
    return out;
  }
  std::vector<float> verify(SequenceState& st, int64_t from, int64_t n) {
    std::vector<float> out(n * vocab);
    m->forward(st, std::span(ids).subspan(from, n), true, out.data(), pass(PassKind::kVerify));
    return out;
  }
};

TEST_F(Qwen3, ConfigAndPlanFollowTheFolder) {
  const format::ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, format::Arch::kQwen3);
  EXPECT_EQ(c.head_dim, 32);  // not hidden / heads = 16
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(m->checkpoint().find("lm_head.weight"), nullptr);
  // Tied: the lm_head views the embedding's bytes.
  EXPECT_EQ(m->plan().lm_head.data, m->plan().embed.data);
  for (const LayerPlan& lp : m->plan().layers) {
    EXPECT_NE(lp.gqa(), nullptr);
    EXPECT_NE(lp.dense(), nullptr);
  }
  EXPECT_EQ(m->tentative_bytes_per_row(), 0u);
}

TEST_F(Qwen3, PromptLogitsMatchTheOracle) {
  SequenceState st = m->new_state();
  std::vector<float> logits(prompt.size() * vocab);
  m->forward(st, prompt, true, logits.data());
  expect_oracle(logits, reference("logits"), vocab, "one prefill pass");
}

TEST_F(Qwen3, PrefillRowsEqualDecodeStepsBitForBit) {
  SequenceState whole = m->new_state(), steps = m->new_state();
  std::vector<float> all(prompt.size() * vocab), one(prompt.size() * vocab);
  m->forward(whole, prompt, true, all.data());
  for (size_t r = 0; r < prompt.size(); ++r)
    m->forward(steps, std::span(prompt).subspan(r, 1), false, one.data() + r * vocab,
               pass(PassKind::kDecode));
  EXPECT_TRUE(same_bytes(all, one));
  expect_same_state(whole, steps, "prefill vs decode");
}

TEST_F(Qwen3, GreedyDecodingThroughTheCacheMatchesTheOracle) {
  SequenceState st = m->new_state(64);
  std::vector<float> rows(greedy.size() * vocab);
  m->forward(st, prompt, false, rows.data());  // row 0: the last prompt position
  std::vector<int32_t> got;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const int32_t id = static_cast<int32_t>(argmax(rows.data() + i * vocab, vocab));
    got.push_back(id);
    if (i + 1 < greedy.size())
      m->forward(st, std::span(&id, 1), false, rows.data() + (i + 1) * vocab,
                 pass(PassKind::kDecode));
  }
  EXPECT_EQ(got, greedy);
  expect_oracle(rows, reference("greedy_logits"), vocab, "greedy decode");
  EXPECT_EQ(st.n_positions, static_cast<int64_t>(prompt.size() + greedy.size() - 1));
}

TEST_F(Qwen3, VerifyRowsEqualDecodeStepsBitForBit) {
  const SequenceState start = prefilled();
  for (int64_t w = 1; w <= 8; ++w) {
    SequenceState steps = start, verified = start;
    const std::vector<float> want = decode(steps, kPrefill, w);
    const std::vector<float> got = verify(verified, kPrefill, w);
    EXPECT_TRUE(same_bytes(want, got)) << "width " << w;
    EXPECT_EQ(verified.tentative_rows, w);
    m->commit(verified, w);
    expect_same_state(steps, verified, "width " + std::to_string(w));
  }
}

TEST_F(Qwen3, CommitPrefixThenDecodeEqualsPlainDecoding) {
  const SequenceState start = prefilled();
  constexpr int64_t w = 6, after = 4;
  for (int64_t keep = 0; keep <= w; ++keep) {
    const std::string what = "keep " + std::to_string(keep) + " of " + std::to_string(w);
    SequenceState plain = start, spec = start;
    const std::vector<float> plain_rows = decode(plain, kPrefill, keep);
    const std::vector<float> spec_rows = verify(spec, kPrefill, w);
    m->commit(spec, keep);
    expect_same_state(plain, spec, what);
    // keep 0 leaves plain_rows empty (a null data()): memcmp must not see it.
    if (!plain_rows.empty()) {
      EXPECT_EQ(0,
                std::memcmp(plain_rows.data(), spec_rows.data(), plain_rows.size() * sizeof(float)))
          << what;
    }
    // The cache was truncated: later rows append where the kept ones end.
    EXPECT_TRUE(
        same_bytes(decode(plain, kPrefill + keep, after), decode(spec, kPrefill + keep, after)))
        << what;
  }
}

TEST_F(Qwen3, ChainedVerifyPassesEqualDecoding) {
  SequenceState plain = prefilled(), spec = plain;
  int64_t at = kPrefill;
  for (const auto& [width, keep] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 3}, {1, 1}, {4, 2}, {5, 0}, {2, 2}}) {
    verify(spec, at, width);
    m->commit(spec, keep);
    decode(plain, at, keep);
    at += keep;
    expect_same_state(plain, spec, "at " + std::to_string(at));
  }
  EXPECT_TRUE(same_bytes(decode(plain, at, 3), decode(spec, at, 3)));
}

TEST_F(Qwen3, APassBeforeTheCommitIsRefused) {
  SequenceState st = prefilled();
  verify(st, kPrefill, 3);
  std::vector<float> logits(vocab);
  EXPECT_THROW(m->forward(st, std::span(ids).subspan(kPrefill, 1), false, logits.data(),
                          pass(PassKind::kDecode)),
               base::Error);
}

// A drafter's rollback: decode steps, then truncate back past the refused ones.
TEST_F(Qwen3, TruncateEqualsNeverHavingDecodedThePositions) {
  const SequenceState start = prefilled();
  for (int64_t keep = 0; keep <= 5; ++keep) {
    const std::string what = "keep " + std::to_string(keep) + " of 5";
    SequenceState plain = start, rolled = start;
    decode(plain, kPrefill, keep);
    decode(rolled, kPrefill, 5);
    m->truncate(rolled, kPrefill + keep);
    expect_same_state(plain, rolled, what);
    EXPECT_TRUE(same_bytes(decode(plain, kPrefill + keep, 3), decode(rolled, kPrefill + keep, 3)))
        << what;
  }
  SequenceState st = start;
  EXPECT_THROW(m->truncate(st, kPrefill + 1), base::Error);  // beyond the sequence
  verify(st, kPrefill, 2);
  EXPECT_THROW(m->truncate(st, 1), base::Error);  // rows still tentative
  m->commit(st, 2);
  m->truncate(st, 0);
  EXPECT_EQ(st.n_positions, 0);
}

TEST(Qwen3Truncate, AModelWithKdaLayersRefusesIt) {
  std::unique_ptr<Model> k3 =
      Model::load(std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a");
  SequenceState st = k3->new_state();
  std::vector<float> logits(k3->config().vocab_size);
  const std::vector<int32_t> ids = {1, 2, 3};
  k3->forward(st, ids, false, logits.data());
  EXPECT_THROW(k3->truncate(st, 2), base::Error);
}

// Two sequences on one model (a drafter's and another): passes interleaved on them give what
// each gives alone.
TEST_F(Qwen3, TwoStatesOnOneModelStayIndependent) {
  SequenceState alone = prefilled();
  const std::vector<float> want = decode(alone, kPrefill, 5);
  SequenceState a = prefilled(), b = m->new_state();
  std::vector<float> got(5 * vocab), other(3 * vocab);
  for (int64_t r = 0; r < 5; ++r) {
    if (r < 3) m->forward(b, std::span(ids).subspan(20 + r, 1), false, other.data() + r * vocab);
    m->forward(a, std::span(ids).subspan(kPrefill + r, 1), false, got.data() + r * vocab,
               pass(PassKind::kDecode));
  }
  EXPECT_TRUE(same_bytes(want, got));
  expect_same_state(alone, a, "interleaved");
}

}  // namespace
}  // namespace deltafin::model
