// Verify passes and commit on the fixture checkpoints: a w-row verify pass equals w decode steps
// bit for bit (logits, taps), commit(j) leaves the state j decode steps leave (KDA state, the
// convolution history, the MLA cache), and decoding goes on from there as if nothing was drafted.
#include <gtest/gtest.h>

#include <cstring>

#include "base/error.h"
#include "model/model.h"
#include "testing/k3_tiny_a.h"

namespace deltafin::model {
namespace {

const std::string kFixtures = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/";
// k3-tiny-a's prompt: the first ids are the prefill, the rest the rows decoded or verified.
const std::vector<int32_t>& kIds = ::deltafin::testing::kK3TinyAPrompt;
constexpr int64_t kPrefill = 8;

// memcmp of two float arrays (empty ones, whose data() may be null, are equal without a call).
bool same_bytes(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}
bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && same_bytes(a.data(), b.data(), a.size());
}

// Every layer's state, compared bit for bit (the tentative log aside).
void expect_same_state(const SequenceState& a, const SequenceState& b, const std::string& what) {
  ASSERT_EQ(a.n_positions, b.n_positions) << what;
  EXPECT_EQ(a.tentative_rows, b.tentative_rows) << what;
  for (size_t l = 0; l < a.kda.size(); ++l) {
    EXPECT_TRUE(same_bytes(a.kda[l].s, b.kda[l].s)) << what << ": KDA state of layer " << l;
    EXPECT_TRUE(same_bytes(a.kda[l].conv, b.kda[l].conv)) << what << ": conv history " << l;
    EXPECT_EQ(a.mla[l].n_positions, b.mla[l].n_positions) << what << ": MLA layer " << l;
    EXPECT_TRUE(same_bytes(a.mla[l].latent, b.mla[l].latent)) << what << ": MLA latents " << l;
    EXPECT_TRUE(same_bytes(a.mla[l].k_pe, b.mla[l].k_pe)) << what << ": MLA k_pe " << l;
  }
}

ForwardOptions pass(PassKind kind) {
  ForwardOptions o;
  o.kind = kind;
  return o;
}

struct Fixture {
  std::unique_ptr<Model> m;
  int64_t vocab = 0;
  SequenceState prefilled;  // after the first kPrefill ids
  explicit Fixture(const std::string& name) : m(Model::load(kFixtures + name)) {
    vocab = m->config().vocab_size;
    prefilled = m->new_state();
    std::vector<float> logits(vocab);
    m->forward(prefilled, std::span(kIds).first(kPrefill), false, logits.data(),
               pass(PassKind::kPrefill));
  }
  // Decode steps over ids[from, from + n) on `st`: their logits, row after row.
  std::vector<float> decode(SequenceState& st, int64_t from, int64_t n) {
    std::vector<float> out(n * vocab);
    for (int64_t r = 0; r < n; ++r)
      m->forward(st, std::span(kIds).subspan(from + r, 1), false, out.data() + r * vocab,
                 pass(PassKind::kDecode));
    return out;
  }
  std::vector<float> verify(SequenceState& st, int64_t from, int64_t n,
                            const ForwardOptions& options = pass(PassKind::kVerify)) {
    std::vector<float> out(n * vocab);
    m->forward(st, std::span(kIds).subspan(from, n), true, out.data(), options);
    return out;
  }
};

class Verify : public ::testing::TestWithParam<const char*> {};

TEST_P(Verify, WRowsEqualWDecodeStepsBitForBit) {
  Fixture f(GetParam());
  for (int64_t w = 1; w <= 8; ++w) {
    SequenceState steps = f.prefilled, verified = f.prefilled;
    const std::vector<float> want = f.decode(steps, kPrefill, w);
    const std::vector<float> got = f.verify(verified, kPrefill, w);
    EXPECT_TRUE(same_bytes(want, got)) << "width " << w;
    EXPECT_EQ(verified.tentative_rows, w);
    EXPECT_EQ(verified.n_positions, kPrefill + w);
  }
}

TEST_P(Verify, CommitPrefixThenDecodeEqualsPlainDecoding) {
  Fixture f(GetParam());
  constexpr int64_t w = 6, after = 4;
  for (int64_t keep = 0; keep <= w; ++keep) {
    const std::string what = "keep " + std::to_string(keep) + " of " + std::to_string(w);
    SequenceState plain = f.prefilled, spec = f.prefilled;
    const std::vector<float> plain_rows = f.decode(plain, kPrefill, keep);
    const std::vector<float> spec_rows = f.verify(spec, kPrefill, w);
    f.m->commit(spec, keep);
    expect_same_state(plain, spec, what);
    // The MLA cache was truncated: later rows append where the kept ones end.
    const std::vector<float> plain_next = f.decode(plain, kPrefill + keep, after);
    const std::vector<float> spec_next = f.decode(spec, kPrefill + keep, after);
    EXPECT_TRUE(same_bytes(plain_next, spec_next)) << what;
    EXPECT_TRUE(same_bytes(plain_rows.data(), spec_rows.data(), plain_rows.size())) << what;
  }
}

TEST_P(Verify, ChainedVerifyPassesEqualDecoding) {
  Fixture f(GetParam());
  SequenceState plain = f.prefilled, spec = f.prefilled;
  // Passes of widths 3, 1 (keep all), 4 (keep 2), 5 (keep 0), 2: what is kept follows the ids.
  int64_t at = kPrefill;
  for (const auto& [width, keep] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 3}, {1, 1}, {4, 2}, {5, 0}, {2, 2}}) {
    f.verify(spec, at, width);
    f.m->commit(spec, keep);
    f.decode(plain, at, keep);
    at += keep;
    expect_same_state(plain, spec, "at " + std::to_string(at));
  }
  EXPECT_TRUE(same_bytes(f.decode(plain, at, 3), f.decode(spec, at, 3)));
}

TEST_P(Verify, TapsEqualTheDecodeStepsTapsAndChangeNothing) {
  Fixture f(GetParam());
  const int64_t d = f.m->config().hidden_size, layers = f.m->config().num_hidden_layers;
  const std::vector<int64_t> taps = {0, layers - 1};
  constexpr int64_t w = 4;
  SequenceState steps = f.prefilled, verified = f.prefilled, untapped = f.prefilled;
  std::vector<float> step_taps(taps.size() * w * d), pass_taps(taps.size() * w * d);
  std::vector<float> one(f.vocab), row_taps(taps.size() * d);
  for (int64_t r = 0; r < w; ++r) {
    ForwardOptions o = pass(PassKind::kDecode);
    o.tap_layers = taps;
    o.tap_out = row_taps.data();
    f.m->forward(steps, std::span(kIds).subspan(kPrefill + r, 1), false, one.data(), o);
    for (size_t t = 0; t < taps.size(); ++t)
      std::copy_n(row_taps.data() + t * d, d, step_taps.data() + (t * w + r) * d);
  }
  ForwardOptions o = pass(PassKind::kVerify);
  o.tap_layers = taps;
  o.tap_out = pass_taps.data();
  const std::vector<float> tapped = f.verify(verified, kPrefill, w, o);
  EXPECT_TRUE(same_bytes(step_taps, pass_taps));
  EXPECT_TRUE(same_bytes(tapped, f.verify(untapped, kPrefill, w)));
  bool nonzero = false;
  for (float v : pass_taps) nonzero |= v != 0.0f;
  EXPECT_TRUE(nonzero);
}

TEST_P(Verify, APassBeforeTheCommitIsRefused) {
  Fixture f(GetParam());
  SequenceState st = f.prefilled;
  f.verify(st, kPrefill, 3);
  std::vector<float> logits(f.vocab);
  EXPECT_THROW(f.m->forward(st, std::span(kIds).subspan(kPrefill, 1), false, logits.data(),
                            pass(PassKind::kDecode)),
               base::Error);
  f.m->commit(st, 1);
  EXPECT_NO_THROW(f.m->forward(st, std::span(kIds).subspan(kPrefill + 1, 1), false, logits.data(),
                               pass(PassKind::kDecode)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Verify, ::testing::Values("k3-tiny-a", "kimi-linear-tiny"));

}  // namespace
}  // namespace deltafin::model
