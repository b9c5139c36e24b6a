// run_draft_trace (include/deltafin/draft.h): the target's greedy continuation with layer taps,
// and a DSpark sequence fed only the rows the target committed, as a speculation loop would.
#include <algorithm>

#include "base/error.h"
#include "deltafin/draft.h"
#include "drafters/dspark_drafter.h"
#include "model/model.h"

namespace deltafin {
namespace {

// The target run greedily, one position at a time, keeping every position's taps.
class GreedyTarget {
 public:
  GreedyTarget(model::Model& m, std::vector<int64_t> tap_layers)
      : m_(m), tap_layers_(std::move(tap_layers)), state_(m.new_state()) {}

  // Runs ids (at the next positions); their taps are kept; returns the last row's argmax.
  int32_t run(std::span<const int32_t> ids) {
    const int64_t n = static_cast<int64_t>(ids.size()), d = m_.config().hidden_size;
    const int64_t k = static_cast<int64_t>(tap_layers_.size());
    std::vector<float> pass(static_cast<size_t>(k * n * d));
    std::vector<float> logits(static_cast<size_t>(m_.config().vocab_size));
    model::ForwardOptions opt;
    opt.kind = n == 1 ? model::PassKind::kDecode : model::PassKind::kPrefill;
    opt.tap_layers = tap_layers_;
    opt.tap_out = pass.data();
    m_.forward(state_, ids, false, logits.data(), opt);
    // Kept position-major: [position][tap][hidden].
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j)
        taps_.insert(taps_.end(), pass.begin() + (j * n + r) * d,
                     pass.begin() + (j * n + r + 1) * d);
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Rows [first, first + rows) in the tap_out layout [tap][row][hidden].
  std::vector<float> taps(int64_t first, int64_t rows) const {
    const int64_t d = m_.config().hidden_size, k = static_cast<int64_t>(tap_layers_.size());
    std::vector<float> out(static_cast<size_t>(k * rows * d));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j)
        std::copy_n(taps_.begin() + ((first + r) * k + j) * d, d, out.begin() + (j * rows + r) * d);
    return out;
  }
  int64_t positions() const { return state_.n_positions; }

 private:
  model::Model& m_;
  std::vector<int64_t> tap_layers_;
  model::SequenceState state_;
  std::vector<float> taps_;
};

}  // namespace

DraftTrace run_draft_trace(const DraftTraceOptions& o) {
  if (o.prompt_ids.empty()) base::fail("draft: the prompt has no ids");
  if (o.steps < 1) base::fail("draft: --steps must be at least 1, got ", o.steps);
  std::unique_ptr<model::Model> k3 = model::Model::load(o.model_dir);
  std::unique_ptr<drafters::DSparkModel> dspark = drafters::DSparkModel::load(o.drafter_dir, *k3);
  drafters::DSparkSequence seq(*dspark);
  GreedyTarget target(*k3, dspark->config().target_layer_ids);
  const int64_t P = static_cast<int64_t>(o.prompt_ids.size());
  constexpr int kRows = drafters::kDSparkBlockRows;
  DraftTrace trace;
  trace.vocab_size = dspark->config().vocab_size;
  trace.rows_per_step = kRows;
  // target_ids[i] is the target's token at position P + i; the one at P + i is known once
  // position P + i - 1 has run.
  trace.target_ids.push_back(target.run(o.prompt_ids));
  seq.append(target.taps(0, P).data(), P, P, 0);
  const auto target_at = [&](int64_t i) {
    while (static_cast<int64_t>(trace.target_ids.size()) <= i)
      trace.target_ids.push_back(target.run(std::span(&trace.target_ids.back(), 1)));
    return trace.target_ids[i];
  };
  for (int s = 0; s < o.steps; ++s) {
    DraftTraceStep step;
    step.context_length = seq.length();
    step.anchor = target_at(step.context_length - P);
    const drafters::DSparkProposal p = seq.propose(step.anchor, kRows, o.keep_logits);
    step.draft_ids = p.ids;
    step.confidence = p.confidence;
    // Compared one by one so the target runs no further than the first miss needs.
    while (step.accepted < kRows &&
           p.ids[step.accepted] == target_at(step.context_length - P + 1 + step.accepted))
      ++step.accepted;
    // The anchor's and the accepted drafts' rows have taps once the target has run them.
    const int64_t keep = step.accepted + 1;
    target_at(step.context_length - P + keep);
    seq.append(target.taps(step.context_length, keep).data(), keep, keep, step.context_length);
    step.new_context_length = seq.length();
    if (o.keep_logits) {
      trace.logits.insert(trace.logits.end(), p.logits.begin(), p.logits.end());
      trace.logits_markov.insert(trace.logits_markov.end(), p.logits_markov.begin(),
                                 p.logits_markov.end());
    }
    trace.steps.push_back(std::move(step));
  }
  return trace;
}

}  // namespace deltafin
