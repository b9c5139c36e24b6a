// A loaded model: its plan (config, traits, weight views), its weight source and expert store,
// and the multi-row forward pass over a sequence's state. Prefill chunks, decode steps and
// speculative verification (tentative rows, then commit) are all calls of forward().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "format/checkpoint.h"
#include "model/layer_source.h"
#include "model/layer_threads.h"
#include "model/pass.h"
#include "model/plan.h"
#include "model/streamed_spine.h"
#include "model/workspace.h"

namespace deltafin::model {

// One sequence's state across all layers. Only the kind each layer uses is filled: kda[l] for KDA
// layers, mla[l] for MLA layers, gqa[l] for GQA layers. Copyable, so a snapshot is a copy.
struct SequenceState {
  std::vector<KdaState> kda;
  std::vector<MlaCache> mla;
  std::vector<GqaCache> gqa;
  int64_t n_positions = 0;  // tentative rows included
  // Rows of the last verify pass not yet kept or dropped (Model::commit); no pass runs until then.
  int64_t tentative_rows = 0;
};

struct ForwardOptions {
  // Decode and verify passes use the decode numerics whatever kda and mla say in kAuto.
  PassKind kind = PassKind::kPrefill;
  KdaMode kda = KdaMode::kAuto;  // auto: chunked for a prefill of several rows, else recurrent
  MlaMode mla = MlaMode::kAuto;  // auto: fewer multiplies; a verify pass: kDecodeRows
  // > 0: attention runs over the rows in consecutive passes of at most this many, carrying its
  // state from one to the next. Everything else in a layer is row by row, so one forward of many
  // rows then equals, bit for bit, forwards of this many rows each, while every weight (and every
  // routed expert) is read once for all of them. Prefill passes only.
  int64_t attention_chunk_tokens = 0;
  // Hidden-state taps for a drafter: after each layer listed (ascending), every row's running sum
  // of the residual stream (the attention-residual block's partial sum after that layer) is copied
  // to tap_out + i · n · hidden for the i-th layer listed, [n, hidden] each.
  std::span<const int64_t> tap_layers;
  float* tap_out = nullptr;
  // Non-null: polled before each layer after the first; when it returns true, forward() stops
  // there by throwing PassCancelled, leaving `state` part-run (the caller must reset it). The poll
  // reads nothing the pass computes, so a pass that is not cancelled is the same bit for bit.
  const std::function<bool()>* cancel_between_layers = nullptr;
  // The pass's name on the timeline when not its kind's (pass_label): a drafter model's passes
  // must not read as the target's decode steps.
  const char* timeline_label = nullptr;
};

// Thrown by forward() when options.cancel_between_layers asked it to stop mid-pass.
struct PassCancelled {};

// What a model serves its weights from besides the checkpoint's mapping, made once the plan and
// checkpoint are open and checked (they outlive these parts, which the model owns). A part left
// empty keeps the mapping.
struct ModelStores {
  std::unique_ptr<experts::ExpertStore> experts;  // null: the mapped checkpoint's experts
  // Its layers stream or stay in memory it owns; the global tensors it was given (spine_globals,
  // the lm_head among them) are used from its copy.
  std::unique_ptr<StreamedSpine> spine;
  std::vector<const format::TensorInfo*> spine_globals;
  // Decode steps (one row) guess the next MoE layer's route at the start of the pass and after
  // every layer, and tell the store (see lookahead.h).
  bool lookahead = false;
  // How many threads each pass's layers run on (see layer_threads.h); none: every thread.
  std::optional<LayerThreads> layer_threads;
};

class Model {
 public:
  // Makes the stores from the opened plan, checkpoint and expert catalog.
  using StoreFactory =
      std::function<ModelStores(const ModelPlan& plan, const format::Checkpoint& checkpoint,
                                const experts::ExpertCatalog& experts)>;

  // Opens DIR (config.json + safetensors), builds and checks the plan, maps the spine and serves
  // routed experts from the mapping. Throws base::Error naming what does not fit.
  static std::unique_ptr<Model> load(const std::string& dir);
  // The same, then the model is built with the stores `make_stores` returns. `experts`: the routed
  // experts of a folder whose checkpoint holds only the spine (a streaming install; the files the
  // catalog names may not exist yet, so the stores must then include an expert store), else
  // those the checkpoint holds.
  // `int8_spine`: the lossy opt-in (--spine-dtype int8): DIR/spine-int8/ (format/spine_int8.h)
  // overlays the checkpoint, so the spine's 2-D BF16 weights bind as per-row int8 and streamed
  // layers read its smaller files. Throws naming the folder when it is missing or unfinished.
  static std::unique_ptr<Model> build(const std::string& dir,
                                      std::optional<experts::ExpertCatalog> experts,
                                      const StoreFactory& make_stores, bool int8_spine = false);

  const format::ModelConfig& config() const { return plan_.config; }
  const ModelPlan& plan() const { return plan_; }
  const experts::ExpertCatalog& expert_catalog() const { return catalog_; }
  const format::Checkpoint& checkpoint() const { return *checkpoint_; }
  // Whether the int8 spine is bound (lossy: every place that names the model says so).
  bool int8_spine() const { return checkpoint_->overlay() != nullptr; }
  experts::ExpertStore& expert_store() { return *store_; }
  // Threads the last pass's layers ran on (0 before the first pass). Safe to read from another
  // thread while a pass runs (a stats request).
  int last_layer_threads() const { return last_layer_threads_.load(std::memory_order_relaxed); }

  // A state whose attention caches are reserved for max_positions (the planned context; 0: they
  // grow as needed). reset() empties a state and keeps its reservation.
  SequenceState new_state(int64_t max_positions = 0) const;
  void reset(SequenceState& state) const;
  // Memory a state holds per tentative row of a verify pass (the KDA layers' logged inputs).
  uint64_t tentative_bytes_per_row() const;

  // Runs ids (n rows at positions state.n_positions ...) through every layer, advancing `state`.
  // Writes logits [n, vocab] when all_rows, else the last row's [vocab]. Passes on one model run
  // one at a time: they share its workspace. A verify pass leaves its rows tentative: commit()
  // must follow before the next pass.
  void forward(SequenceState& state, std::span<const int32_t> ids, bool all_rows, float* logits,
               const ForwardOptions& options = {});
  // Keeps the first `keep` rows of the last verify pass and drops the rest: the state is then
  // what `keep` decode passes over those ids would have left, bit for bit. keep 0 discards them.
  void commit(SequenceState& state, int64_t keep);
  // Rolls `state` back to its first n_positions positions (<= state.n_positions), committed ones
  // included: the state is then what passes over those ids alone would have left, bit for bit
  // (a drafter dropping the drafts the target refused). Only for models whose every layer caches
  // per position (MLA, GQA); throws base::Error for a model with KDA layers (their recurrent state
  // keeps no history: verify and commit(), or keep a snapshot) or while rows are tentative.
  void truncate(SequenceState& state, int64_t n_positions);

 private:
  Model() = default;
  // Config, checkpoint, weight source and plan; the experts are the callers' part.
  static std::unique_ptr<Model> open(const std::string& dir, bool int8_spine = false);

  // The embeddings of ids into the residual stream's partial sum.
  void embed(std::span<const int32_t> ids, float* h);
  // Layer `layer` over the pass's n rows: mix → norm → attention → add → mix → norm → MLP → add.
  void layer(int64_t layer, SequenceState& state, int64_t n, const ForwardOptions& options);
  // Each records its phase on the timeline (base/timeline.h) for the whole layer.
  void attention(const LayerPlan& lp, int64_t layer, SequenceState& state, const float* x,
                 int64_t n, const ForwardOptions& options, float* out);
  void mlp(const LayerPlan& lp, int64_t layer, const float* x, int64_t n, float* out);
  // The output mix, final norm and lm_head for the last row, or all n.
  void head(int64_t n, bool all_rows, float* logits);
  // With the lookahead on, in a decode or verify pass: guesses the route of the first MoE layer
  // at or after `from` from the current state, the union over the pass's rows, and tells the
  // store (see lookahead.h).
  void predict_next_moe(int64_t from, int64_t n, PassKind kind);
  // Copies the residual stream's running sum after layer `l` when it is tapped.
  void tap(int64_t l, int64_t n, const ForwardOptions& options);

  std::unique_ptr<format::Checkpoint> checkpoint_;
  std::unique_ptr<WeightSource> source_;
  ModelPlan plan_;
  experts::ExpertCatalog catalog_;
  std::unique_ptr<experts::ExpertStore> store_;
  std::unique_ptr<LayerSource> layers_;
  bool lookahead_ = false;
  std::optional<LayerThreads> layer_threads_;
  std::atomic<int> last_layer_threads_{0};
  std::vector<int32_t> predicted_union_;  // the lookahead's guesses over a verify pass's rows
  Workspace ws_;                          // every pass's intermediates (passes are serialized)
};

}  // namespace deltafin::model
