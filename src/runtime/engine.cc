// The public Engine and Session over model::Model: prefill in chunks, decode one id at a time,
// generation with stop rules, the session's ids and prefix sync, timings, and the folder's text
// side. Forward passes of all sessions of one engine are serialized (the kernels share one thread
// pool).
#include <algorithm>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <optional>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "base/stopwatch.h"
#include "base/timeline.h"
#include "deltafin/engine.h"
#include "model/model.h"
#include "runtime/gpu_backend.h"
#include "runtime/model_drafters.h"
#include "runtime/sampler.h"
#include "runtime/session_drafter.h"
#include "runtime/speculator.h"
#include "runtime/streaming.h"
#include "runtime/text.h"
#include "tokenizer/tokenizer.h"

namespace deltafin {
namespace runtime {
namespace {

// The context a session may reach: what was asked, or the default, never beyond what the model
// was built for.
int64_t resolve_max_context(int64_t asked, const format::ModelConfig& c) {
  const int64_t model_max = c.max_position_embeddings;
  if (asked < 0) base::fail("--max-context must be positive, got ", asked);
  if (asked == 0)
    return model_max > 0 ? std::min(model_max, kDefaultMaxContext) : kDefaultMaxContext;
  if (model_max > 0 && asked > model_max)
    base::fail("--max-context ", asked, " exceeds the model's max_position_embeddings ", model_max);
  return asked;
}

// Rows per prefill pass: a multiple of the attention chunk, so that its attention passes split the
// prompt exactly where chunk-sized passes would and the result is the same bit for bit.
int prefill_group(int chunk, int asked) {
  const int want = asked > 0 ? asked : kDefaultPrefillGroup;
  return std::max(chunk, want / chunk * chunk);
}

class SessionImpl : public Session {
 public:
  SessionImpl(model::Model* model, std::unique_ptr<GpuSession> gpu, std::mutex* mu, int chunk,
              int group, int64_t max_context, DrafterModel* dspark, DrafterModel* qwen)
      : model_(model),
        gpu_(std::move(gpu)),
        mu_(mu),
        attention_chunk_(chunk),
        prefill_group_(group),
        max_context_(max_context),
        state_(gpu_ ? model::SequenceState{} : model->new_state(max_context)),
        last_logits_(gpu_ ? gpu_->host_memory() : std::pmr::get_default_resource()),
        verify_logits_(last_logits_.get_allocator()),
        dspark_(dspark ? dspark->new_session() : nullptr),
        qwen_(qwen ? qwen->new_session() : nullptr) {}

  std::vector<float> forward(std::span<const int32_t> ids, bool all_rows) override;
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                          const TokenCallback& on_token) override;
  int64_t sync(std::span<const int32_t> ids) override;
  const std::vector<int32_t>& ids() const override { return ids_; }
  int64_t position() const override { return static_cast<int64_t>(ids_.size()); }
  void reset() override {
    if (gpu_) {
      gpu_->reset();
    } else {
      model_->reset(state_);
    }
    ids_.clear();
    pending_ = -1;
    last_logits_.clear();
    stats_ = {};
    if (dspark_) dspark_->rewind(0);
    if (qwen_) qwen_->rewind(0);
  }
  const SessionStats& stats() const override { return stats_; }

 private:
  // Runs ids (after any pending id) in passes of prefill_group_ rows whose attention runs
  // attention_chunk_ rows at a time; returns all rows' logits or the last row's. With `cancel`
  // (last row only), polls it between passes and stops early, setting *cancelled; with
  // `between_layers` also between layers, where a cancel resets the session (empty result).
  std::vector<float> run(std::vector<int32_t> ids, bool all_rows,
                         const std::function<bool()>* cancel = nullptr, bool* cancelled = nullptr,
                         bool between_layers = false);
  // Runs the pending id, then `drafts` after it: a decode pass without drafts, else a verify pass
  // whose rows stay tentative until keep(). Leaves every row's logits, [1 + drafts, vocab], in
  // last_logits_ (a decode pass) or verify_logits_, whose memory is reused (a token's 655 KB of
  // K3 logits is neither allocated nor copied afresh); returns them.
  std::span<const float> step(std::span<const int32_t> drafts);
  // Keeps the first `rows` rows of the verify pass that gave `logits` (the pending id and rows - 1
  // drafted ids); the last kept row's logits become the session's.
  void keep(int64_t rows, std::span<const float> logits);
  // Sets `options` to tap what the DSpark drafter reads in a pass of n rows, when it is keeping
  // up with this sequence and this request drafts with it; returns whether it did.
  bool tap(model::ForwardOptions& options, int64_t n);
  // The sequence's positions, and a pass or commit on it, on whichever backend holds it.
  int64_t positions() const { return gpu_ ? gpu_->n_positions() : state_.n_positions; }
  void pass(std::span<const int32_t> ids, bool all_rows, float* logits,
            const model::ForwardOptions& options) {
    if (gpu_) {
      gpu_->forward(ids, all_rows, logits, options.kind == model::PassKind::kVerify,
                    options.cancel_between_layers);
    } else {
      model_->forward(state_, ids, all_rows, logits, options);
    }
  }

  model::Model* model_;
  std::unique_ptr<GpuSession> gpu_;  // null: the CPU model runs the passes on state_
  std::mutex* mu_;
  int attention_chunk_;  // rows per attention pass
  int prefill_group_;    // rows per forward pass (a multiple of attention_chunk_)
  int64_t max_context_;  // positions the memory plan set the attention cache aside for
  model::SequenceState state_;
  std::vector<int32_t> ids_;  // the ids in state_, then pending_ if set
  int32_t pending_ = -1;      // last generated id, not yet run through the model
  // The logits of the row the pending id was drawn from (a decode pass writes them here), and
  // a verify pass's rows; in the backend's host memory (pinned for the GPU: copied by DMA).
  std::pmr::vector<float> last_logits_;
  std::pmr::vector<float> verify_logits_;
  SessionStats stats_;
  Speculator speculator_;  // drafts and the verify widths' costs, learned over the session
  std::unique_ptr<SessionDrafter> dspark_;  // null: the engine has no DSpark drafter
  std::unique_ptr<SessionDrafter> qwen_;    // null: nor a Qwen3 one
  bool want_taps_ = false;                  // the last generate call may draft with DSpark
  std::vector<float> taps_;                 // the last pass's taps, [layers][rows][hidden]
  int64_t tapped_rows_ = 0;                 // rows in taps_ (0: the last pass was not tapped)
};

class EngineImpl : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& options) : options_(options) {
    // The options the plan is made for, resolved against the config first.
    const format::ModelConfig config = format::load_config(options.model_dir);
    options_.max_context_tokens = resolve_max_context(options_.max_context_tokens, config);
    options_.attention_chunk_tokens = std::max(1, options_.attention_chunk_tokens);
    options_.prefill_group_tokens =
        prefill_group(options_.attention_chunk_tokens, options_.prefill_group_tokens);
    if (options_.read_depth <= 0) options_.read_depth = kDefaultReadDepth;
    const std::vector<DrafterCandidate> candidates =
        drafter_candidates(options_.model_dir, config, options_.drafters);
    std::string why;
    gpu_ = load_gpu_backend(options_, options_.max_context_tokens, &why);
    if (gpu_) {
      model_ = &gpu_->model();
      base::log_info(gpu_->info().summary);
      // Model drafters borrow the CPU model's passes (DSpark its taps): the GPU runs without them.
      for (const DrafterCandidate& d : candidates) {
        if (d.cost.forced)
          base::fail("drafter ", d.cost.name, " runs with the CPU backend only: use --device cpu");
        base::log_info("drafter ", d.cost.name, " not loaded: the CUDA backend drafts by n-gram");
      }
    } else {
      if (!why.empty()) base::log_info("device: cpu (", why, ")");
      if (options_.gpu_expert_math == GpuExpertMath::kTensorCores)
        base::log_info(
            "--gpu-expert-math tensor: no effect on the CPU backend (its experts run "
            "one arithmetic)");
      std::vector<DrafterCost> costs;
      for (const DrafterCandidate& d : candidates) costs.push_back(d.cost);
      streaming_ = Streaming::load(options_, costs);
      model_ = &streaming_->model();
      load_drafters(candidates);
    }
    const format::ModelConfig& c = model_->config();
    info_.arch = format::arch_name(c.arch);
    info_.vocab_size = c.vocab_size;
    info_.hidden_size = c.hidden_size;
    info_.n_layers = c.num_hidden_layers;
    info_.bos_id = c.bos_token_id;
    info_.eos_id = c.eos_token_id;
    info_.pad_id = c.pad_token_id;
    info_.max_context_tokens = options_.max_context_tokens;
    info_.spine_dtype = spine_dtype_name(options_.spine_dtype);
    info_.lossy = options_.spine_dtype != SpineDType::kBf16;
  }
  const ModelInfo& info() const override { return info_; }
  const Text& text() const override {
    std::call_once(text_once_, [this] {
      text_ = load_text(options_.model_dir, model_->config(), target_tokenizer_);
    });
    return *text_;
  }
  MemoryPlanInfo memory_plan() const override { return gpu_ ? gpu_->info() : streaming_->info(); }
  StreamStats stream_stats() const override {
    return gpu_ ? gpu_->tier_stats() : streaming_->stats();
  }
  GpuStats gpu_stats() const override { return gpu_ ? gpu_->pass_counters() : GpuStats{}; }
  std::unique_ptr<Session> new_session() override {
    std::unique_ptr<GpuSession> gpu = gpu_ ? gpu_->new_session() : nullptr;
    return std::make_unique<SessionImpl>(model_, std::move(gpu), &mu_,
                                         options_.attention_chunk_tokens,
                                         options_.prefill_group_tokens, info_.max_context_tokens,
                                         dspark_model_.get(), qwen_model_.get());
  }

 private:
  // Loads the candidates the memory plan chose. One that fails to load is an error when it was
  // asked for by name, else a warning: the engine runs without it (n-gram lookup drafts).
  void load_drafters(const std::vector<DrafterCandidate>& candidates) {
    const std::vector<std::string>& chosen = streaming_->info().drafters;
    for (const DrafterCandidate& d : candidates) {
      if (std::find(chosen.begin(), chosen.end(), d.cost.name) == chosen.end()) continue;
      const base::Stopwatch time;
      try {
        if (d.dir.kind == format::DrafterKind::kDSpark) {
          dspark_model_ = load_dspark_drafter(d.dir.path, *model_);
        } else {
          // The engine's Text (text()) will share this tokenizer instead of loading it again.
          target_tokenizer_ = std::make_shared<const tokenizer::Tokenizer>(
              load_tokenizer(options_.model_dir, model_->config()));
          qwen_model_ = load_qwen_drafter(d.dir.path, target_tokenizer_);
        }
      } catch (const base::Error& e) {
        if (d.cost.forced) throw;
        base::log_warn("drafter ", d.cost.name, " not loaded: ", e.what());
        continue;
      }
      base::log_info("drafter ", d.cost.name, " loaded from ", d.dir.path, " in ",
                     time.elapsed_ms() / 1000.0, " s (", base::format_bytes(d.cost.bytes),
                     " with one session's context)");
    }
  }

  EngineOptions options_;
  std::unique_ptr<GpuBackend> gpu_;       // the model in VRAM (then no streaming_), or null
  std::unique_ptr<Streaming> streaming_;  // owns the model on the CPU path
  model::Model* model_ = nullptr;
  std::unique_ptr<DrafterModel> dspark_model_;  // null: none in the folder, or not worth its RAM
  std::unique_ptr<DrafterModel> qwen_model_;
  // The folder's tokenizer, loaded with the Qwen3 drafter (null until then; text() loads its own).
  std::shared_ptr<const tokenizer::Tokenizer> target_tokenizer_;
  ModelInfo info_;
  std::mutex mu_;
  mutable std::once_flag text_once_;  // a failed load leaves it unset: the next call retries
  mutable std::unique_ptr<Text> text_;
};

std::vector<float> SessionImpl::run(std::vector<int32_t> ids, bool all_rows,
                                    const std::function<bool()>* cancel, bool* cancelled,
                                    bool between_layers) {
  const bool had_pending = pending_ >= 0;
  if (had_pending) ids.insert(ids.begin(), pending_);
  const int64_t vocab = model_->config().vocab_size, n = static_cast<int64_t>(ids.size());
  if (positions() + n > max_context_) {
    base::fail("the sequence would hold ", positions() + n,
               " tokens, beyond this engine's context of ", max_context_,
               " (--max-context; the memory plan sets its attention cache aside)");
  }
  for (const int32_t id : ids)
    if (id < 0 || id >= vocab)
      base::fail("token id ", id, " is outside the vocabulary [0, ", vocab, ")");
  pending_ = -1;
  std::vector<float> out(all_rows ? n * vocab : vocab);
  DF_ASSERT(n > 0);
  std::lock_guard<std::mutex> lock(*mu_);
  const base::Stopwatch pass_time;
  int64_t done = 0;
  model::ForwardOptions options;
  options.attention_chunk_tokens = attention_chunk_;
  if (between_layers && !all_rows && cancel && *cancel) options.cancel_between_layers = cancel;
  for (int64_t begin = 0; begin < n; begin += prefill_group_) {
    if (begin > 0 && !all_rows && cancel && *cancel && (*cancel)()) {
      *cancelled = true;  // the state holds ids[0, begin); `out` has the last row's logits
      break;
    }
    const int64_t len = std::min<int64_t>(prefill_group_, n - begin);
    done = begin + len;
    // A pass before the last one still needs running for the state when only the last row's
    // logits are wanted; its logits land in `out` and are overwritten.
    const bool tapped = tap(options, len);
    try {
      pass(std::span(ids).subspan(begin, len), all_rows,
           all_rows ? out.data() + begin * vocab : out.data(), options);
      if (tapped) dspark_->commit_rows(taps_.data(), len, 0, len);
    } catch (const model::PassCancelled&) {
      reset();  // the pass stopped between two layers: no id list describes the state
      *cancelled = true;
      return {};
    } catch (...) {
      reset();  // a pass that failed part-way leaves a state no id list describes
      throw;
    }
  }
  // The pending id is in ids_ already.
  ids_.insert(ids_.end(), ids.begin() + (had_pending ? 1 : 0), ids.begin() + done);
  const double ms = pass_time.elapsed_ms();
  (n == 1 ? stats_.decode_ms : stats_.prefill_ms) += ms;
  (n == 1 ? stats_.decode_tokens : stats_.prefill_tokens) += done;
  last_logits_.assign(out.end() - vocab, out.end());
  if (had_pending && all_rows) out.erase(out.begin(), out.begin() + vocab);
  return out;
}

std::span<const float> SessionImpl::step(std::span<const int32_t> drafts) {
  DF_ASSERT(pending_ >= 0);
  std::vector<int32_t> ids{pending_};
  ids.insert(ids.end(), drafts.begin(), drafts.end());
  const int64_t vocab = model_->config().vocab_size, n = static_cast<int64_t>(ids.size());
  DF_ASSERT(positions() + n <= max_context_);
  for (const int32_t id : drafts) DF_ASSERT(id >= 0 && id < vocab);  // drafters propose ids
  std::pmr::vector<float>& out = drafts.empty() ? last_logits_ : verify_logits_;
  out.resize(n * vocab);
  std::lock_guard<std::mutex> lock(*mu_);
  const base::Stopwatch pass_time;
  model::ForwardOptions options;
  options.kind = drafts.empty() ? model::PassKind::kDecode : model::PassKind::kVerify;
  const bool tapped = tap(options, n);
  try {
    pass(ids, true, out.data(), options);
    // A decode pass commits its row now; a verify pass's rows wait for keep().
    if (tapped && drafts.empty()) {
      dspark_->commit_rows(taps_.data(), 1, 0, 1);
      tapped_rows_ = 0;
    }
  } catch (...) {
    reset();  // a pass that failed part-way leaves a state no id list describes
    throw;
  }
  pending_ = -1;  // in ids_ already
  stats_.decode_ms += pass_time.elapsed_ms();
  ++stats_.decode_passes;
  if (drafts.empty()) {
    ++stats_.decode_tokens;
  } else {
    ++stats_.verify_passes;
    stats_.drafted_tokens += n - 1;
  }
  return out;
}

void SessionImpl::keep(int64_t rows, std::span<const float> logits) {
  const int64_t vocab = model_->config().vocab_size;
  {
    std::lock_guard<std::mutex> lock(*mu_);
    if (gpu_) {
      gpu_->commit(rows);
    } else {
      model_->commit(state_, rows);
    }
  }
  if (tapped_rows_ > 0) dspark_->commit_rows(taps_.data(), tapped_rows_, 0, rows);
  stats_.decode_tokens += rows;
  stats_.accepted_tokens += rows - 1;
  last_logits_.assign(logits.begin() + (rows - 1) * vocab, logits.begin() + rows * vocab);
}

bool SessionImpl::tap(model::ForwardOptions& options, int64_t n) {
  tapped_rows_ = 0;
  // The GPU backend has no taps: DSpark (loaded only for the CPU backend) never drafts there.
  if (gpu_ || !dspark_ || !want_taps_ || !dspark_->ready(positions())) return false;
  const std::span<const int64_t> layers = dspark_->tap_layers();
  taps_.resize(layers.size() * n * model_->config().hidden_size);
  options.tap_layers = layers;
  options.tap_out = taps_.data();
  tapped_rows_ = n;
  return true;
}

std::vector<float> SessionImpl::forward(std::span<const int32_t> ids, bool all_rows) {
  if (ids.empty()) base::fail("forward: no token ids given");
  return run(std::vector<int32_t>(ids.begin(), ids.end()), all_rows);
}

int64_t SessionImpl::sync(std::span<const int32_t> ids) {
  // An equal list is kept too: the session still holds the logits (or the pending id) at its end.
  const bool extends = !ids_.empty() && ids_.size() <= ids.size() &&
                       std::equal(ids_.begin(), ids_.end(), ids.begin());
  if (!extends) reset();
  return static_cast<int64_t>(ids_.size());
}

GenerateResult SessionImpl::generate(std::span<const int32_t> prompt,
                                     const GenerateOptions& options,
                                     const TokenCallback& on_token) {
  GenerateResult result;
  // DSpark reads this request's passes when it may draft for it; a request that skips them
  // leaves DSpark behind the sequence, unable to draft until the session starts over.
  want_taps_ = options.speculation.mode == Speculation::kAuto ||
               options.speculation.mode == Speculation::kDspark;
  if (!prompt.empty()) {
    bool cancelled = false;
    run(std::vector<int32_t>(prompt.begin(), prompt.end()), false, &options.cancel, &cancelled,
        options.cancel_between_layers);
    if (cancelled) {
      result.stop = StopReason::kCancelled;
      return result;
    }
  } else if (pending_ >= 0) {
    if (positions() + 1 > max_context_) {
      result.stop = StopReason::kContextFull;
      return result;
    }
    step({});
  } else if (last_logits_.empty()) {
    base::fail("generate: empty prompt on an empty session");
  }
  result.stop = StopReason::kMaxTokens;
  if (options.max_new_tokens <= 0) return result;
  Sampler sampler(options);
  Speculator::ModelDrafters models;
  if (dspark_ && dspark_->ready(positions())) models.dspark = dspark_.get();
  if (qwen_ && qwen_->ready(positions())) models.qwen = qwen_.get();
  speculator_.begin(options.speculation, models);
  const int64_t eos = model_->config().eos_token_id, vocab = model_->config().vocab_size;
  // The rows to draw from: the logits after the pending id, then after each drafted id the last
  // pass verified. Each row's id is drawn exactly as a decode step would draw it (the same
  // logits, bit for bit, and the same generator), so the ids do not depend on the drafts.
  std::span<const float> rows = last_logits_;
  std::vector<int32_t> drafts;
  double pass_ms = 0.0;
  const char* decision = "";
  const char* drafter = "";
  double draft_ms = 0.0;
  bool ran_pass = false;  // the rows came from a pass of this loop (else from the prompt's)
  int generated = 0;
  for (;;) {
    int64_t used = 0;  // rows drawn from
    std::optional<StopReason> stop;
    for (;;) {
      const int32_t id = [&] {
        base::timeline::Phase phase("sample");
        return sampler.next(std::span<const float>(rows).subspan(used * vocab, vocab));
      }();
      ++used;
      ++generated;
      result.ids.push_back(id);
      ids_.push_back(id);
      pending_ = id;
      if (on_token && !on_token(id)) {
        stop = StopReason::kCallback;
      } else if (options.stop_at_eos && id == eos) {
        stop = StopReason::kEos;
      } else if (std::find(options.stop_ids.begin(), options.stop_ids.end(), id) !=
                 options.stop_ids.end()) {
        stop = StopReason::kStopId;
      } else if (generated >= options.max_new_tokens) {
        stop = StopReason::kMaxTokens;
      }
      // A drafted id the model did not draw ends the pass's useful rows, as does a stop: the
      // rows after it are dropped, never emitted.
      if (stop || used > static_cast<int64_t>(drafts.size()) || id != drafts[used - 1]) break;
    }
    if (!drafts.empty()) {
      keep(used, rows);
      speculator_.observe(static_cast<int>(drafts.size()), static_cast<int>(used - 1));
    }
    if (ran_pass && options.on_pass) {
      options.on_pass({static_cast<int>(drafts.size()) + 1, static_cast<int>(drafts.size()),
                       static_cast<int>(used - 1), pass_ms, decision, drafter, draft_ms});
    }
    if (stop) {
      result.stop = *stop;
      return result;
    }
    if (positions() + 1 > max_context_) {
      result.stop = StopReason::kContextFull;
      return result;
    }
    // Drafted ids beyond the ids still wanted or the context's room would be wasted rows.
    const int64_t room =
        std::min<int64_t>(options.max_new_tokens - generated - 1, max_context_ - positions() - 1);
    // A model drafter's proposal runs kernels on the pool the passes share: one at a time.
    const Speculator::Plan plan = [&] {
      std::lock_guard<std::mutex> lock(*mu_);
      return speculator_.plan(ids_, generated, static_cast<int>(room));
    }();
    drafts = plan.drafts;
    decision = plan.decision;
    drafter = plan.drafter;
    draft_ms = plan.draft_ms;
    stats_.draft_ms += plan.draft_ms;
    const base::Stopwatch pass_time;
    {
      base::timeline::Phase phase("step");
      rows = step(drafts);
    }
    ran_pass = true;
    pass_ms = pass_time.elapsed_ms();
    speculator_.record_pass(static_cast<int>(drafts.size()) + 1, pass_ms / 1000.0);
  }
}

}  // namespace
}  // namespace runtime

const char* spine_dtype_name(SpineDType dtype) {
  return dtype == SpineDType::kInt8 ? "int8" : "bf16";
}

std::string lossy_suffix(const ModelInfo& info) {
  return info.lossy ? "-" + info.spine_dtype + "-spine" : "";
}

std::unique_ptr<Engine> Engine::load(const EngineOptions& options) {
  return std::make_unique<runtime::EngineImpl>(options);
}

}  // namespace deltafin
