// The DSpark drafter against the dspark-tiny-a oracle (TorchSpec's model code in float64): K3's
// taps, the context features, and the recorded 6-step trace, with the context built from our K3
// taps (the engine's path) and from the oracle's taps (the drafter alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include "base/error.h"
#include "drafters/dspark_drafter.h"
#include "format/safetensors.h"
#include "model/model.h"
#include "testing/k3_tiny_a.h"

namespace deltafin::drafters {
namespace {

const std::string kDir = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/dspark-tiny-a";
constexpr double kBound = 5e-4;  // of the largest |value| (issue #17)

// reference.safetensors, every tensor widened to double.
class Reference {
 public:
  Reference() {
    const std::string path = kDir + "/reference.safetensors";
    std::ifstream in(path, std::ios::binary);
    for (const format::TensorInfo& t : format::read_safetensors_header(path)) {
      std::string bytes(t.nbytes, '\0');
      in.seekg(static_cast<std::streamoff>(t.offset));
      in.read(bytes.data(), static_cast<std::streamsize>(t.nbytes));
      std::vector<double>& v = values_[t.name];
      v.resize(static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < v.size(); ++i) {
        if (t.dtype == format::DType::kF64) {
          std::memcpy(&v[i], bytes.data() + 8 * i, 8);
        } else {
          int32_t x;
          std::memcpy(&x, bytes.data() + 4 * i, 4);
          v[i] = x;
        }
      }
      shapes_[t.name] = t.shape;
    }
  }
  const std::vector<double>& operator[](const std::string& name) const { return values_.at(name); }
  std::vector<int32_t> ints(const std::string& name) const {
    const auto& v = values_.at(name);
    return std::vector<int32_t>(v.begin(), v.end());
  }

 private:
  std::map<std::string, std::vector<double>> values_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

const Reference& ref() {
  static const Reference r;
  return r;
}

double max_abs(const double* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(b[i]));
  return m;
}
// max|a - b| / max|b|
template <typename T>
double rel_err(const T* a, const double* b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; ++i) e = std::max(e, std::abs(static_cast<double>(a[i]) - b[i]));
  return e / max_abs(b, n);
}

struct Fixture {
  std::unique_ptr<model::Model> k3 = model::Model::load(::deltafin::testing::kK3TinyADir);
  std::unique_ptr<DSparkModel> dspark = DSparkModel::load(kDir, *k3);
  std::vector<int32_t> prompt = ref().ints("prompt_ids");
  std::vector<int32_t> target = ref().ints("target_ids");
  int64_t rows() const { return static_cast<int64_t>(prompt.size() + target.size()); }
  int64_t hidden() const { return dspark->config().hidden_size; }
  int64_t n_taps() const { return dspark->config().n_taps(); }

  // Our taps [n_taps, rows, hidden] of one prefill over prompt + target_ids.
  std::vector<float> our_taps() const {
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), target.begin(), target.end());
    std::vector<float> taps(static_cast<size_t>(n_taps() * rows() * hidden()));
    model::ForwardOptions opt;
    opt.tap_layers = dspark->config().target_layer_ids;
    opt.tap_out = taps.data();
    model::SequenceState st = k3->new_state();
    std::vector<float> logits(static_cast<size_t>(k3->config().vocab_size));
    k3->forward(st, ids, false, logits.data(), opt);
    return taps;
  }
  // The oracle's taps [rows, n_taps, hidden] in the same [n_taps, rows, hidden] layout.
  std::vector<float> oracle_taps() const {
    const std::vector<double>& t = ref()["taps"];
    std::vector<float> out(t.size());
    for (int64_t p = 0; p < rows(); ++p)
      for (int64_t j = 0; j < n_taps(); ++j)
        for (int64_t i = 0; i < hidden(); ++i)
          out[(j * rows() + p) * hidden() + i] =
              static_cast<float>(t[(p * n_taps() + j) * hidden() + i]);
    return out;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

TEST(DSparkOracle, K3TapsMatchTheOracle) {
  Fixture& f = fixture();
  const std::vector<float> ours = f.our_taps();
  const std::vector<float> want32 = f.oracle_taps();
  const std::vector<double> want(want32.begin(), want32.end());  // F64 → F32 costs ~1e-8
  for (int64_t j = 0; j < f.n_taps(); ++j) {
    const size_t n = static_cast<size_t>(f.rows() * f.hidden()), at = j * n;
    const double e = rel_err(ours.data() + at, want.data() + at, n);
    std::cout << "tap " << f.dspark->config().target_layer_ids[j] << ": max err / max|tap| " << e
              << "\n";
    EXPECT_LT(e, kBound) << "tap " << j;
  }
}

TEST(DSparkOracle, ContextFeaturesMatchTheOracle) {
  Fixture& f = fixture();
  for (const bool oracle : {false, true}) {
    const std::vector<float> taps = oracle ? f.oracle_taps() : f.our_taps();
    DSparkContext ctx(f.dspark->config());
    std::vector<float> u(static_cast<size_t>(f.rows() * f.hidden()));
    f.dspark->append_context(ctx, taps.data(), f.rows(), f.rows(), 0, u.data());
    const double e = rel_err(u.data(), ref()["context_feature"].data(), u.size());
    std::cout << (oracle ? "oracle" : "our") << " taps: context features err " << e << "\n";
    EXPECT_LT(e, oracle ? 1e-5 : kBound);
    EXPECT_EQ(ctx.length(), f.rows());
  }
}

// Runs the recorded trace with the context from `taps`: every step's ids, logits, confidence,
// acceptance and new context length.
void run_trace(const std::vector<float>& taps, double logit_bound, const char* what) {
  Fixture& f = fixture();
  const Reference& r = ref();
  const int64_t vocab = f.dspark->config().vocab_size, d = f.hidden();
  const int64_t P = static_cast<int64_t>(f.prompt.size());
  const std::vector<int32_t> ctx_len = r.ints("step_ctx_len"), anchors = r.ints("step_anchor");
  const std::vector<int32_t> drafts = r.ints("step_draft_ids"), prevs = r.ints("step_prev_ids");
  const std::vector<int32_t> accepted = r.ints("step_accepted"),
                             new_len = r.ints("step_new_ctx_len");
  const double logit_scale = max_abs(r["step_logits"].data(), r["step_logits"].size());
  const double markov_scale =
      max_abs(r["step_logits_markov"].data(), r["step_logits_markov"].size());
  DSparkSequence seq(*f.dspark);
  seq.append(taps.data(), f.rows(), P, 0);  // the prompt's rows
  double worst_logit = 0, worst_markov = 0, worst_hidden = 0, worst_conf = 0;
  for (size_t s = 0; s < ctx_len.size(); ++s) {
    const int64_t L = seq.length();
    ASSERT_EQ(L, ctx_len[s]) << what << " step " << s;
    const int32_t anchor = f.target[L - P];
    ASSERT_EQ(anchor, anchors[s]) << what << " step " << s;
    const DSparkProposal p = seq.propose(anchor, kDSparkBlockRows, /*want_logits=*/true);
    const size_t row0 = s * kDSparkBlockRows;
    for (int k = 0; k < kDSparkBlockRows; ++k) {
      EXPECT_EQ(p.ids[k], drafts[row0 + k]) << what << " step " << s << " row " << k;
      EXPECT_EQ(p.prev_ids[k], prevs[row0 + k]) << what << " step " << s << " row " << k;
      const double cl = r["step_confidence_logit"][row0 + k];
      worst_conf = std::max(worst_conf, std::abs(p.confidence_logit[k] - cl));
      EXPECT_NEAR(p.confidence[k], r["step_confidence"][row0 + k], 1e-4) << what << " step " << s;
    }
    for (size_t i = 0; i < p.logits.size(); ++i) {
      const size_t at = row0 * vocab + i;
      worst_logit = std::max(worst_logit, std::abs(p.logits[i] - r["step_logits"][at]));
      worst_markov =
          std::max(worst_markov, std::abs(p.logits_markov[i] - r["step_logits_markov"][at]));
    }
    worst_hidden =
        std::max(worst_hidden,
                 rel_err(p.hidden.data(), r["step_hidden"].data() + row0 * d, p.hidden.size()));
    // Accepted: the longest prefix of drafts equal to the target's continuation after the anchor.
    int a = 0;
    while (a < kDSparkBlockRows && L - P + 1 + a < static_cast<int64_t>(f.target.size()) &&
           p.ids[a] == f.target[L - P + 1 + a])
      ++a;
    EXPECT_EQ(a, accepted[s]) << what << " step " << s;
    // Only the rows K3 committed become context: the anchor and the accepted drafts.
    seq.append(taps.data() + L * d, f.rows(), a + 1, L);
    EXPECT_EQ(seq.length(), new_len[s]) << what << " step " << s;
  }
  std::cout << what << ": logits err/max " << worst_logit / logit_scale << ", +Markov "
            << worst_markov / markov_scale << ", hidden " << worst_hidden
            << ", confidence logit abs " << worst_conf << "\n";
  EXPECT_LT(worst_logit / logit_scale, logit_bound) << what;
  EXPECT_LT(worst_markov / markov_scale, logit_bound) << what;
  EXPECT_LT(worst_hidden, logit_bound) << what;
  EXPECT_LT(worst_conf, 1e-3) << what;
}

TEST(DSparkOracle, TraceFromOurK3Taps) { run_trace(fixture().our_taps(), kBound, "our taps"); }

// The oracle's taps (rounded to F32 once): the drafter alone, held to the README's fp32 1e-5.
TEST(DSparkOracle, TraceFromTheOracleTaps) {
  run_trace(fixture().oracle_taps(), 1e-5, "oracle taps");
}

TEST(DSparkOracle, ProposeOnlyScoresTheFirstWidthRowsAndChangesNothing) {
  Fixture& f = fixture();
  const std::vector<float> taps = f.our_taps();
  DSparkSequence seq(*f.dspark);
  seq.append(taps.data(), f.rows(), 26, 0);
  const DSparkProposal full = seq.propose(269, 7, true);
  const DSparkProposal two = seq.propose(269, 2, true);
  ASSERT_EQ(two.ids.size(), 2u);
  EXPECT_EQ(two.logits.size(), 2u * f.dspark->config().vocab_size);
  EXPECT_EQ(std::vector<int32_t>(full.ids.begin(), full.ids.begin() + 2), two.ids);
  EXPECT_EQ(seq.length(), 26);
  EXPECT_THROW(seq.propose(269, 8), base::Error);
  EXPECT_THROW(seq.propose(269, 0), base::Error);
  EXPECT_THROW(seq.append(taps.data(), f.rows(), 1, 25), base::Error);  // not at length()
  // truncate + re-append gives the same context as appending once.
  seq.truncate(24);
  seq.append(taps.data() + 24 * f.hidden(), f.rows(), 2, 24);
  EXPECT_EQ(seq.propose(269, 7).ids, full.ids);
  seq.reset();
  EXPECT_EQ(seq.length(), 0);
}

}  // namespace
}  // namespace deltafin::drafters
