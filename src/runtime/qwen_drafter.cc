// The Qwen3 cross-tokenizer drafter (spec drafting.md §2): the target's committed ids become text
// (the target's tokenizer), the text becomes Qwen ids (tokenizer.json), Qwen continues them
// greedily from its own KV cache, and the continuation's text goes back through the target's
// tokenizer. Only target ids that extend the history exactly become drafts. Unlike Deltafin,
// Qwen's cache is kept across steps: each step runs only the Qwen ids past the longest prefix it
// already holds, and truncates the rest (its drafts the target refused, or a re-encoding that
// moved a boundary).
#include <algorithm>
#include <cmath>
#include <memory>

#include "base/error.h"
#include "runtime/model_drafters.h"
#include "runtime/text.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::runtime {
namespace {

// Target ids re-encoded before the drafts' text to check the boundary: enough for any merge
// across it (a pre-tokenizer piece is far shorter), few enough to cost nothing.
constexpr int64_t kBoundaryIds = 16;
// Qwen ids generated per proposal: the budget plus two (a Qwen token is often shorter than a K3
// one), within [3, 20] as Deltafin does; a Qwen token below kMinProbability ends the draft once
// two are in (§2.2 step 3).
constexpr int kMinQwenTokens = 3, kMaxQwenTokens = 20;
constexpr float kMinProbability = 0.30f;

struct QwenShared {
  std::unique_ptr<model::Model> qwen;
  tokenizer::Tokenizer qwen_text;
  std::shared_ptr<const tokenizer::Tokenizer> target_text;  // the engine's Text shares it
};

class QwenSession final : public SessionDrafter {
 public:
  explicit QwenSession(QwenShared& shared)
      : s_(shared), state_(shared.qwen->new_state(kQwenMaxPositions)) {}

  const char* name() const override { return "qwen"; }
  // It reads the ids, not the target's hidden states: whatever the session holds, it can follow.
  void rewind(int64_t positions) override {
    if (positions < start_) restart(0);
  }
  bool ready(int64_t) const override { return true; }

  Draft propose(std::span<const int32_t> history, int max_tokens) override {
    Draft d;
    const int64_t n = static_cast<int64_t>(history.size());
    if (max_tokens <= 0 || n == 0) return d;
    if (n - start_ > kQwenContextIds) restart(n - kQwenContextIds / 2);
    const std::string text = target_bytes(history.subspan(start_));
    std::vector<int32_t> ids = s_.qwen_text.encode_ordinary(text);
    const int budget = std::clamp(max_tokens + 2, kMinQwenTokens, kMaxQwenTokens);
    if (ids.empty()) return d;
    if (static_cast<int64_t>(ids.size()) + budget > kQwenMaxPositions) {
      restart(n - kQwenContextIds / 2);
      return d;  // the next step starts from the shorter window
    }
    const std::vector<int32_t> qwen_drafts = continue_qwen(ids, budget);
    if (qwen_drafts.empty()) return d;
    d.ids = translate(history, s_.qwen_text.decode_bytes(qwen_drafts), max_tokens);
    return d;
  }

 private:
  void restart(int64_t start) {
    start_ = start;
    s_.qwen->reset(state_);
    held_.clear();
  }

  std::string target_bytes(std::span<const int32_t> ids) const {
    return s_.target_text->decode_bytes(std::vector<int32_t>(ids.begin(), ids.end()));
  }

  // Brings Qwen's cache to `ids` (reusing the longest prefix it holds) and generates greedily up
  // to `budget` ids after them; the generated ids stay in the cache for the next step.
  std::vector<int32_t> continue_qwen(const std::vector<int32_t>& ids, int budget) {
    const int64_t vocab = s_.qwen->config().vocab_size;
    size_t common =
        std::mismatch(held_.begin(), held_.end(), ids.begin(), ids.end()).first - held_.begin();
    // At least the last id runs again: its logits are what the first draft comes from.
    common = std::min(common, ids.size() - 1);
    s_.qwen->truncate(state_, static_cast<int64_t>(common));
    held_.assign(ids.begin(), ids.begin() + common);
    logits_.resize(static_cast<size_t>(vocab));
    run(std::span(ids).subspan(common));
    std::vector<int32_t> out;
    for (int i = 0; i < budget; ++i) {
      const auto best = std::max_element(logits_.begin(), logits_.end());
      const int32_t id = static_cast<int32_t>(best - logits_.begin());
      if (id >= s_.qwen_text.vocab_size() || s_.qwen_text.is_special(id)) break;
      if (i >= 2 && probability(*best) < kMinProbability) break;
      out.push_back(id);
      if (i + 1 < budget) run(std::span(&out.back(), 1));
    }
    return out;
  }

  void run(std::span<const int32_t> ids) {
    model::ForwardOptions o;
    o.kind = ids.size() == 1 ? model::PassKind::kDecode : model::PassKind::kPrefill;
    o.timeline_label = "qwen3 drafter pass";
    s_.qwen->forward(state_, ids, false, logits_.data(), o);
    held_.insert(held_.end(), ids.begin(), ids.end());
  }

  // Softmax probability of the largest logit `top`.
  float probability(float top) const {
    double sum = 0.0;
    for (const float v : logits_) sum += std::exp(static_cast<double>(v) - top);
    return static_cast<float>(1.0 / sum);
  }

  // The target ids that the draft text adds after the history, if the history's last ids still
  // encode to themselves with the text appended (else a merge across the boundary: none). The
  // last id is dropped: text after the draft could still merge with it.
  std::vector<int32_t> translate(std::span<const int32_t> history, const std::string& draft,
                                 int max_tokens) const {
    const int64_t n = static_cast<int64_t>(history.size());
    const std::span<const int32_t> tail = history.subspan(n - std::min(n, kBoundaryIds));
    const std::vector<int32_t> ids = s_.target_text->encode_ordinary(target_bytes(tail) + draft);
    if (ids.size() <= tail.size() || !std::equal(tail.begin(), tail.end(), ids.begin())) return {};
    const size_t extra = ids.size() - tail.size() - 1;
    const size_t take = std::min<size_t>(extra, static_cast<size_t>(max_tokens));
    return std::vector<int32_t>(ids.begin() + tail.size(), ids.begin() + tail.size() + take);
  }

  QwenShared& s_;
  model::SequenceState state_;
  std::vector<int32_t> held_;  // the Qwen ids state_ holds
  int64_t start_ = 0;          // the first history position its text covers
  std::vector<float> logits_;
};

class QwenDrafterModel final : public DrafterModel {
 public:
  explicit QwenDrafterModel(QwenShared shared) : s_(std::move(shared)) {}
  const char* name() const override { return "qwen"; }
  std::unique_ptr<SessionDrafter> new_session() override {
    return std::make_unique<QwenSession>(s_);
  }

 private:
  QwenShared s_;
};

}  // namespace

std::unique_ptr<DrafterModel> load_qwen_drafter(
    const std::string& dir, std::shared_ptr<const tokenizer::Tokenizer> target_tokenizer) {
  QwenShared s{model::Model::load(dir), load_tokenizer(dir, format::load_config(dir)),
               std::move(target_tokenizer)};
  if (s.qwen->config().arch != format::Arch::kQwen3)
    base::fail("Qwen drafter ", dir, ": config.json is not a qwen3 model");
  if (s.qwen_text.vocab_size() > s.qwen->config().vocab_size)
    base::fail("Qwen drafter ", dir, ": tokenizer.json has ", s.qwen_text.vocab_size(),
               " ids but config.json's vocab_size is ", s.qwen->config().vocab_size);
  return std::make_unique<QwenDrafterModel>(std::move(s));
}

uint64_t qwen_context_bytes(const std::string& dir) {
  const format::ModelConfig c = format::load_config(dir);
  return static_cast<uint64_t>(c.num_hidden_layers) * c.num_key_value_heads * c.head_dim * 2 *
         sizeof(float) * kQwenMaxPositions;
}

}  // namespace deltafin::runtime
