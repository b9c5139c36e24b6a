// DSpark behind the session seam: one DSparkSequence per session, appended with the taps of the
// rows the target committed (prefill rows, decode rows, a verify pass's kept rows), and asked for
// up to seven drafts after the pending id.
#include <algorithm>

#include "base/error.h"
#include "drafters/dspark_drafter.h"
#include "runtime/model_drafters.h"

namespace deltafin::runtime {
namespace {

class DSparkSession final : public SessionDrafter {
 public:
  explicit DSparkSession(const drafters::DSparkModel& model)
      : seq_(model, kDSparkMaxContext), taps_(model.config().target_layer_ids) {}

  const char* name() const override { return "dspark"; }
  std::span<const int64_t> tap_layers() const override { return taps_; }

  void commit_rows(const float* taps, int64_t n, int64_t first, int64_t count) override {
    // The engine hands over a pass's leading rows; the tap layout ([tap][row][hidden]) has no
    // stride that would let a later first row through without a copy.
    DF_ASSERT(first == 0 && count <= n);
    if (count > 0) seq_.append(taps, n, count, seq_.length());
  }
  void rewind(int64_t positions) override {
    // A session that moved past what DSpark holds cannot be caught up without the taps: it stays
    // behind (ready() is false) until the session rewinds to what it holds or starts over.
    if (positions <= seq_.length()) seq_.truncate(positions);
  }
  bool ready(int64_t positions) const override {
    return seq_.length() == positions && positions < kDSparkMaxContext;
  }

  Draft propose(std::span<const int32_t> history, int max_tokens) override {
    Draft d;
    const int width = std::min(max_tokens, drafters::kDSparkBlockRows);
    // The pending id is the anchor at position length(): the cache must hold all before it.
    if (width <= 0 || static_cast<int64_t>(history.size()) != seq_.length() + 1) return d;
    drafters::DSparkProposal p = seq_.propose(history.back(), width);
    d.ids = std::move(p.ids);
    d.confidence = std::move(p.confidence);
    return d;
  }

 private:
  drafters::DSparkSequence seq_;
  std::vector<int64_t> taps_;
};

class DSparkDrafterModel final : public DrafterModel {
 public:
  explicit DSparkDrafterModel(std::unique_ptr<drafters::DSparkModel> model)
      : model_(std::move(model)) {}
  const char* name() const override { return "dspark"; }
  std::unique_ptr<SessionDrafter> new_session() override {
    return std::make_unique<DSparkSession>(*model_);
  }

 private:
  std::unique_ptr<drafters::DSparkModel> model_;
};

}  // namespace

std::unique_ptr<DrafterModel> load_dspark_drafter(const std::string& dir,
                                                  const model::Model& target) {
  return std::make_unique<DSparkDrafterModel>(drafters::DSparkModel::load(dir, target));
}

uint64_t dspark_context_bytes(const std::string& dir) {
  const drafters::DSparkConfig c = drafters::load_dspark_config(dir);
  return static_cast<uint64_t>(c.num_layers) * (c.kv_lora_rank + c.rope_dim) * sizeof(float) *
         kDSparkMaxContext;
}

}  // namespace deltafin::runtime
