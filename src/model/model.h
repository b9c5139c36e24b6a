// A loaded model: its plan (config, traits, weight views), its weight source and expert store,
// and the multi-row forward pass over a sequence's state. Prefill chunks, decode steps and
// (later) speculative verification are all calls of forward() with different row counts.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "format/checkpoint.h"
#include "model/layer_source.h"
#include "model/layer_threads.h"
#include "model/plan.h"
#include "model/workspace.h"

namespace deltafin::model {

// One sequence's state across all layers. Only the kind each layer uses is filled: kda[l] for KDA
// layers, mla[l] for MLA layers. Copyable, so a snapshot is a copy.
struct SequenceState {
  std::vector<KdaState> kda;
  std::vector<MlaCache> mla;
  int64_t n_positions = 0;
};

struct ForwardOptions {
  KdaMode kda = KdaMode::kAuto;  // auto: chunked for several rows, recurrent for one
  MlaMode mla = MlaMode::kAuto;  // auto: fewer multiplies (decode on a cache: absorbed)
  // > 0: attention runs over the rows in consecutive passes of at most this many, carrying its
  // state from one to the next. Everything else in a layer is row by row, so one forward of many
  // rows then equals, bit for bit, forwards of this many rows each, while every weight (and every
  // routed expert) is read once for all of them.
  int64_t attention_rows = 0;
};

class Model {
 public:
  // Opens DIR (config.json + safetensors), builds and checks the plan, maps the spine and serves
  // routed experts from the mapping. Throws base::Error naming what does not fit.
  static std::unique_ptr<Model> load(const std::string& dir);
  // The same for a folder whose checkpoint holds only the spine (a streaming install): the routed
  // experts are `experts`, found by the caller, and no store serves them until the caller sets
  // one with set_expert_store (the files the catalog names may not exist yet).
  static std::unique_ptr<Model> load(const std::string& dir, experts::ExpertCatalog experts);

  const format::ModelConfig& config() const { return plan_.config; }
  const ModelPlan& plan() const { return plan_; }
  const experts::ExpertCatalog& expert_catalog() const { return catalog_; }
  const format::Checkpoint& checkpoint() const { return *checkpoint_; }
  // Replaces the expert store (streaming stores, tests).
  void set_expert_store(std::unique_ptr<experts::ExpertStore> store);
  experts::ExpertStore& expert_store() { return *store_; }
  // Points lm_head at a copy of its bytes elsewhere (same shape and dtype; the caller keeps the
  // bytes alive as long as the model).
  void set_lm_head(const WeightMatrix& lm_head);
  // Serves layer plans from `source` (a streamed spine) instead of plan().layers; null: resident.
  void set_layer_source(std::unique_ptr<LayerSource> source) { layers_ = std::move(source); }
  // Decode steps (one row) guess the next MoE layer's route at the start of the pass and after
  // every layer, and tell the store (see lookahead.h).
  void set_lookahead(bool on) { lookahead_ = on; }
  // Decides how many threads each pass's layers run on (see layer_threads.h); without it they run
  // on every thread of the pool.
  void set_layer_threads(const LayerThreads& policy) { layer_threads_ = policy; }
  // Threads the last pass's layers ran on (0 before the first pass). Safe to read from another
  // thread while a pass runs (a stats request).
  int last_layer_threads() const { return last_layer_threads_.load(std::memory_order_relaxed); }

  // A state whose attention caches are reserved for max_positions (the planned context; 0: they
  // grow as needed). reset() empties a state and keeps its reservation.
  SequenceState new_state(int64_t max_positions = 0) const;
  void reset(SequenceState& state) const;

  // Runs ids (n rows at positions state.n_positions ...) through every layer, advancing `state`.
  // Writes logits [n, vocab] when all_rows, else the last row's [vocab]. Passes on one model run
  // one at a time: they share its workspace.
  void forward(SequenceState& state, std::span<const int32_t> ids, bool all_rows, float* logits,
               const ForwardOptions& options = {});

 private:
  Model() = default;
  // Config, checkpoint, weight source and plan; the experts are the callers' part.
  static std::unique_ptr<Model> open(const std::string& dir);

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
  // With the lookahead on and one row: guesses the route of the first MoE layer at or after
  // `from` from the current state and tells the store (see lookahead.h).
  void predict_next_moe(int64_t from, int64_t n);

  std::unique_ptr<format::Checkpoint> checkpoint_;
  std::unique_ptr<WeightSource> source_;
  ModelPlan plan_;
  experts::ExpertCatalog catalog_;
  std::unique_ptr<experts::ExpertStore> store_;
  std::unique_ptr<LayerSource> layers_;
  bool lookahead_ = false;
  std::optional<LayerThreads> layer_threads_;
  std::atomic<int> last_layer_threads_{0};
  Workspace ws_;  // every pass's intermediates (passes are serialized)
};

}  // namespace deltafin::model
