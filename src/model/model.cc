// Model loading and the layer loop: embedding, per layer (attention-residual mix →) RMSNorm →
// KDA, MLA or GQA → (mix →) RMSNorm → dense MLP or MoE, final mix → norm → lm_head.
#include "model/model.h"

#include <algorithm>
#include <set>

#include "base/error.h"
#include "base/stopwatch.h"
#include "base/thread_pool.h"
#include "base/timeline.h"
#include "experts/mapped_expert_store.h"
#include "format/config.h"
#include "format/spine_int8.h"
#include "kernels/activation.h"

namespace deltafin::model {
std::unique_ptr<Model> Model::open(const std::string& dir, bool int8_spine) {
  std::unique_ptr<Model> m(new Model());
  const format::ModelConfig config = format::load_config(dir);
  m->checkpoint_ = std::make_unique<format::Checkpoint>(format::Checkpoint::open(dir));
  if (int8_spine) m->checkpoint_->set_overlay(format::open_int8_spine(dir));
  m->source_ = std::make_unique<MappedWeightSource>(*m->checkpoint_);
  m->plan_ = build_plan(config, *m->source_);
  return m;
}

namespace {

// The checkpoint's tensors, with the spine's global ones served from the spine's copy: a plan
// built over it views the lm_head where the spine read it.
class SpineGlobalsSource : public WeightSource {
 public:
  SpineGlobalsSource(const format::Checkpoint& checkpoint, const StreamedSpine& spine,
                     const std::vector<const format::TensorInfo*>& globals)
      : mapped_(checkpoint), spine_(spine), globals_(globals.begin(), globals.end()) {}
  const format::TensorInfo& info(std::string_view name) const override {
    return mapped_.info(name);
  }
  const uint8_t* bytes(const format::TensorInfo& tensor) override {
    return globals_.count(&tensor) ? spine_.global(tensor) : mapped_.bytes(tensor);
  }

 private:
  MappedWeightSource mapped_;
  const StreamedSpine& spine_;
  std::set<const format::TensorInfo*> globals_;
};

// Serves every expert's span from the checkpoint's mapping.
std::unique_ptr<experts::ExpertStore> mapped_experts(const experts::ExpertCatalog& catalog,
                                                     const format::Checkpoint* ckpt) {
  return std::make_unique<experts::MappedExpertStore>(
      catalog, [ckpt](const format::ExpertSpan& span) {
        const format::TensorInfo whole{base::str_cat("layer ", span.layer, " expert ", span.expert),
                                       format::DType::kU8,
                                       {static_cast<int64_t>(span.nbytes)},
                                       span.file,
                                       span.offset,
                                       span.nbytes};
        return ckpt->map(whole).data();
      });
}

}  // namespace

std::unique_ptr<Model> Model::build(const std::string& dir,
                                    std::optional<experts::ExpertCatalog> experts,
                                    const StoreFactory& make_stores, bool int8_spine) {
  std::unique_ptr<Model> m = open(dir, int8_spine);
  const bool own_experts = !experts.has_value();
  if (own_experts) {
    m->catalog_ = build_expert_catalog(*m->checkpoint_, m->plan_.config);
  } else {
    DF_ASSERT(experts->layers.size() == m->plan_.layers.size());
    m->catalog_ = std::move(*experts);
  }
  ModelStores stores;
  if (make_stores) stores = make_stores(m->plan_, *m->checkpoint_, m->catalog_);
  if (stores.experts) {
    m->store_ = std::move(stores.experts);
  } else {
    DF_ASSERT(own_experts);  // a streaming install's spans cannot be mapped before they exist
    m->store_ = mapped_experts(m->catalog_, m->checkpoint_.get());
  }
  if (stores.spine) {
    SpineGlobalsSource over_spine(*m->checkpoint_, *stores.spine, stores.spine_globals);
    m->plan_.lm_head = build_plan(m->plan_.config, over_spine).lm_head;
    m->layers_ = std::move(stores.spine);
  }
  m->lookahead_ = stores.lookahead;
  m->layer_threads_ = stores.layer_threads;
  return m;
}

std::unique_ptr<Model> Model::load(const std::string& dir) { return build(dir, std::nullopt, {}); }

SequenceState Model::new_state(int64_t max_positions) const {
  SequenceState s;
  s.kda.resize(plan_.layers.size());
  s.mla.resize(plan_.layers.size());
  for (MlaCache& cache : s.mla) cache.max_positions = max_positions;
  s.gqa.resize(plan_.layers.size());
  for (GqaCache& cache : s.gqa) cache.max_positions = max_positions;
  reset(s);
  return s;
}

uint64_t Model::tentative_bytes_per_row() const {
  uint64_t bytes = 0;
  for (const LayerPlan& lp : plan_.layers)
    if (lp.kda() != nullptr) bytes += kda_tentative_bytes_per_row(plan_.kda_shape);
  return bytes;
}

void Model::reset(SequenceState& s) const {
  for (size_t l = 0; l < plan_.layers.size(); ++l) {
    if (plan_.layers[l].kda() != nullptr) {
      s.kda[l].reset(plan_.kda_shape);
    } else if (plan_.layers[l].gqa() != nullptr) {
      s.gqa[l].reset(plan_.gqa_shape, s.gqa[l].max_positions);
    } else {
      s.mla[l].reset(plan_.mla_shape, s.mla[l].max_positions);
    }
  }
  s.n_positions = 0;
  s.tentative_rows = 0;
}

void Model::embed(std::span<const int32_t> ids, float* h) {
  const format::ModelConfig& c = plan_.config;
  for (const int32_t id : ids) {
    if (id < 0 || id >= c.vocab_size)
      base::fail("token id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")");
    kernels::will_need_row(plan_.embed, id);  // every row's read starts before the first waits
  }
  base::timeline::Phase phase("embed");
  for (size_t r = 0; r < ids.size(); ++r)
    kernels::decode_row(plan_.embed, ids[r], h + r * c.hidden_size);
}

void Model::attention(const LayerPlan& lp, int64_t layer, SequenceState& state, const float* x,
                      int64_t n, const ForwardOptions& options, float* out) {
  base::timeline::Phase phase("attention", layer);
  const bool prefill = options.kind == PassKind::kPrefill;
  const bool tentative = options.kind == PassKind::kVerify;
  const int64_t step =
      prefill && options.attention_chunk_tokens > 0 ? options.attention_chunk_tokens : n;
  // Decode and verify rows take the decode numerics: recurrent KDA, MLA as for one row.
  const KdaMode kda_mode =
      !prefill && options.kda == KdaMode::kAuto ? KdaMode::kRecurrent : options.kda;
  const MlaMode mla_mode =
      tentative && options.mla == MlaMode::kAuto ? MlaMode::kDecodeRows : options.mla;
  const int64_t d = plan_.config.hidden_size;
  for (int64_t r = 0; r < n; r += step) {
    const int64_t rows = std::min(step, n - r);
    if (const KdaWeights* kda = lp.kda()) {
      kda_forward(plan_.kda_shape, *kda, x + r * d, rows, state.kda[layer], kda_mode, ws_.kda,
                  out + r * d, tentative);
    } else if (const GqaWeights* gqa = lp.gqa()) {
      // Every pass kind takes the same per-row arithmetic: a verify row is a decode step.
      gqa_forward(plan_.gqa_shape, *gqa, x + r * d, rows, state.gqa[layer], ws_.gqa, out + r * d);
    } else {
      mla_forward(plan_.mla_shape, *lp.mla(), x + r * d, rows, state.mla[layer], mla_mode, ws_.mla,
                  out + r * d);
    }
  }
}

void Model::mlp(const LayerPlan& lp, int64_t layer, const float* x, int64_t n, float* out) {
  const MoeWeights* moe = lp.moe();
  base::timeline::Phase phase(moe != nullptr ? "moe" : "dense mlp", layer);
  if (moe != nullptr) {
    moe_forward(plan_.moe_shape, *moe, static_cast<int>(layer), *store_, x, n, ws_.moe, out);
  } else {
    glu_mlp(plan_.traits.activation, *lp.dense(), x, n, ws_.dense, out);
  }
}

void Model::predict_next_moe(int64_t from, int64_t n, PassKind kind) {
  if (!lookahead_ || kind == PassKind::kPrefill) return;
  for (int64_t l = from; l < plan_.config.num_hidden_layers; ++l) {
    if (plan_.layers[l].moe() == nullptr) continue;
    base::timeline::Phase phase("lookahead", l);
    // A pass reads the union of its rows' routes: guess each row's, row 0's first (a decode
    // pass's one row gives its route unchanged: a route's experts are distinct).
    predicted_union_.clear();
    for (int64_t r = 0; r < n; ++r) {
      for (const int32_t e : predict_route(plan_, plan_.layers[l], ws_.stream, r, ws_.lookahead))
        if (std::find(predicted_union_.begin(), predicted_union_.end(), e) ==
            predicted_union_.end())
          predicted_union_.push_back(e);
    }
    store_->prefetch(static_cast<int>(l), predicted_union_);
    return;
  }
}

void Model::tap(int64_t l, int64_t n, const ForwardOptions& options) {
  const auto& taps = options.tap_layers;
  const auto it = std::find(taps.begin(), taps.end(), l);
  if (it == taps.end()) return;
  const int64_t d = plan_.config.hidden_size;
  std::copy_n(ws_.stream.partial(), n * d, options.tap_out + (it - taps.begin()) * n * d);
}

void Model::layer(int64_t l, SequenceState& state, int64_t n, const ForwardOptions& options) {
  const LayerPlan& lp = [&]() -> const LayerPlan& {
    if (!layers_) return plan_.layers[l];
    base::timeline::Phase wait("wait for spine layer", l);
    return layers_->acquire(l);
  }();
  // A streamed layer's bytes stay valid until the end of this call (or an exception).
  struct Held {
    LayerSource* source;
    int64_t layer;
    ~Held() {
      if (source) source->release(layer);
    }
  } held{layers_.get(), l};
  const int64_t d = plan_.config.hidden_size;
  const float eps = static_cast<float>(plan_.config.rms_norm_eps);
  ResidualStream& stream = ws_.stream;
  float *x = ws_.x.get(n * d), *y = ws_.y.get(n * d);
  stream.mix(lp.attn_res, x);
  stream.enter_layer(l);
  kernels::rmsnorm_rows(x, lp.input_norm.data(), n, d, eps, x);
  attention(lp, l, state, x, n, options, y);
  stream.add(y);
  stream.mix(lp.mlp_res, x);
  kernels::rmsnorm_rows(x, lp.post_norm.data(), n, d, eps, x);
  mlp(lp, l, x, n, y);
  stream.add(y);
  tap(l, n, options);
  predict_next_moe(l + 1, n, options.kind);
}

void Model::head(int64_t n, bool all_rows, float* logits) {
  const int64_t d = plan_.config.hidden_size;
  const float eps = static_cast<float>(plan_.config.rms_norm_eps);
  const int64_t first = all_rows ? 0 : n - 1, rows = n - first;
  float *x = ws_.x.get(rows * d), *y = ws_.y.get(rows * d);
  ws_.stream.mix_rows(plan_.output_res, first, rows, x);
  kernels::rmsnorm_rows(x, plan_.final_norm.data(), rows, d, eps, y);
  base::timeline::Phase phase("lm_head");
  kernels::matmul(plan_.lm_head, y, rows, logits);
}

void Model::forward(SequenceState& state, std::span<const int32_t> ids, bool all_rows,
                    float* logits, const ForwardOptions& options) {
  const format::ModelConfig& c = plan_.config;
  const int64_t n = static_cast<int64_t>(ids.size());
  DF_ASSERT(n > 0 && store_ != nullptr);
  DF_ASSERT(options.kind != PassKind::kDecode || n == 1);
  DF_ASSERT(options.tap_layers.empty() || options.tap_out != nullptr);
  if (state.tentative_rows > 0)
    base::fail("a verify pass's rows are still tentative: commit them before the next pass");
  base::timeline::Phase pass(options.timeline_label ? options.timeline_label
                                                    : pass_label(options.kind));
  const base::Stopwatch pass_time;
  // Time waited on reads so far (experts, streamed spine layers): the pass's share of it decides
  // the next pass's layer threads.
  const auto waited = [this] {
    return store_->stats().wait_seconds + (layers_ ? layers_->wait_seconds() : 0.0);
  };
  const double waited_before = layer_threads_ ? waited() : 0;
  embed(ids,
        ws_.stream.begin(n, c.hidden_size, c.num_hidden_layers, plan_.traits.attn_res_block_size,
                         static_cast<float>(c.rms_norm_eps)));
  store_->begin_pass(state.n_positions, n);
  if (layers_) layers_->begin_pass();
  predict_next_moe(0, n, options.kind);  // the disk would idle through a dense layer 0
  {
    base::ThreadPool& pool = base::default_pool();
    const int layer_threads = layer_threads_ ? layer_threads_->for_pass(options.kind) : pool.size();
    const base::ActiveThreads layer_scope(pool, layer_threads);
    last_layer_threads_.store(layer_threads, std::memory_order_relaxed);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      if (l > 0 && options.cancel_between_layers && (*options.cancel_between_layers)())
        throw PassCancelled{};
      layer(l, state, n, options);
    }
    state.n_positions += n;
    if (options.kind == PassKind::kVerify) state.tentative_rows = n;
  }  // the lm_head has no read to share the memory with: every thread again
  head(n, all_rows, logits);
  if (layer_threads_) {
    layer_threads_->observe(options.kind, pass_time.elapsed_seconds(), waited() - waited_before);
  }
}

void Model::commit(SequenceState& state, int64_t keep) {
  DF_ASSERT(keep >= 0 && keep <= state.tentative_rows);
  const int64_t drop = state.tentative_rows - keep;
  base::timeline::Phase phase("commit");
  for (size_t l = 0; l < plan_.layers.size(); ++l) {
    if (plan_.layers[l].kda() != nullptr) {
      kda_commit(plan_.kda_shape, state.kda[l], keep, ws_.kda);
    } else if (plan_.layers[l].gqa() != nullptr) {
      state.gqa[l].truncate(plan_.gqa_shape, state.gqa[l].n_positions - drop);
    } else {
      state.mla[l].truncate(plan_.mla_shape, state.mla[l].n_positions - drop);
    }
  }
  state.n_positions -= drop;
  state.tentative_rows = 0;
}

void Model::truncate(SequenceState& state, int64_t n) {
  if (n < 0 || n > state.n_positions)
    base::fail("truncate: ", n, " positions asked, the sequence holds ", state.n_positions);
  if (state.tentative_rows > 0)
    base::fail("truncate: a verify pass's rows are still tentative: commit them first");
  for (const LayerPlan& lp : plan_.layers)
    if (lp.kda() != nullptr)
      base::fail(
          "truncate: this model has KDA layers, whose recurrent state cannot be rolled back "
          "to an earlier position (use a verify pass and commit, or a snapshot)");
  base::timeline::Phase phase("truncate");
  for (size_t l = 0; l < plan_.layers.size(); ++l) {
    if (plan_.layers[l].gqa() != nullptr) {
      state.gqa[l].truncate(plan_.gqa_shape, n);
    } else {
      state.mla[l].truncate(plan_.mla_shape, n);
    }
  }
  state.n_positions = n;
}

}  // namespace deltafin::model
