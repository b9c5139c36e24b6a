// Streaming setup: measures each tier's cost on the opened model, plans, builds the model.
#include "runtime/streaming.h"

#include <algorithm>
#include <tuple>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "base/stopwatch.h"
#include "base/thread_pool.h"
#include "experts/mapped_expert_store.h"
#include "experts/placement.h"
#include "experts/route_trace.h"
#include "experts/streaming_expert_store.h"
#include "io/page_cache_warmer.h"
#include "model/gqa.h"
#include "model/mla.h"
#include "runtime/memory_plan.h"
#include "runtime/speculator.h"

namespace deltafin::runtime {
namespace {

// Activations of one prefill pass of prefill_group_tokens, logits for attention_chunk_tokens rows,
// the sequence state and scratch (attention runs attention_chunk_tokens at a time); the attention
// caches are context_bytes(). Generation needs the last row's logits only; `deltafin logits` keeps
// one pass's rows (prefill_group_tokens x vocab), which this plan does not hold.
uint64_t working_bytes(const model::ModelPlan& plan, int attention_chunk_tokens,
                       int prefill_group_tokens, int64_t max_context) {
  const format::ModelConfig& c = plan.config;
  DF_ASSERT(attention_chunk_tokens >= 1 &&
            prefill_group_tokens >= attention_chunk_tokens);  // resolved by the engine
  const uint64_t rows = static_cast<uint64_t>(prefill_group_tokens);
  uint64_t kda_state = 0;
  for (const model::LayerPlan& lp : plan.layers) {
    if (lp.kda() != nullptr) {
      kda_state += static_cast<uint64_t>(plan.kda_shape.n_heads) * plan.kda_shape.head_dim *
                   plan.kda_shape.head_dim * sizeof(float);
    }
  }
  // The layer loop's rows (hidden state, mixes, AttnRes blocks) and the MoE's per-rank outputs.
  const uint64_t activations = rows * static_cast<uint64_t>(c.hidden_size) * sizeof(float) * 16 +
                               rows * static_cast<uint64_t>(plan.moe_shape.router.top_k) *
                                   static_cast<uint64_t>(plan.moe_shape.width) * sizeof(float);
  const uint64_t logits = 2 * static_cast<uint64_t>(attention_chunk_tokens) *
                          static_cast<uint64_t>(c.vocab_size) * sizeof(float);
  const uint64_t mla_scratch =
      model::mla_auto_scratch_bytes(plan.mla_shape, attention_chunk_tokens, max_context);
  // Speculation: the widest verify pass's tentative rows (each KDA layer logs its inputs per row)
  // and the per-head state copies its delta rule runs on (one layer at a time).
  uint64_t tentative = 0;
  for (const model::LayerPlan& lp : plan.layers)
    if (lp.kda() != nullptr)
      tentative += kMaxVerifyRows * model::kda_tentative_bytes_per_row(plan.kda_shape);
  tentative += static_cast<uint64_t>(plan.kda_shape.n_heads) * plan.kda_shape.head_dim *
               plan.kda_shape.head_dim * sizeof(float);
  return (uint64_t{256} << 20) + kda_state + activations + logits + mla_scratch + tentative;
}

// Every MLA and GQA layer's cache at max_context positions (KDA layers keep a fixed state).
uint64_t context_bytes(const model::ModelPlan& plan, int64_t max_context) {
  uint64_t per_position = 0;
  for (const model::LayerPlan& lp : plan.layers) {
    if (lp.mla() != nullptr) per_position += model::mla_cache_bytes_per_position(plan.mla_shape);
    if (lp.gqa() != nullptr) per_position += model::gqa_cache_bytes_per_position(plan.gqa_shape);
  }
  return per_position * static_cast<uint64_t>(max_context);
}

// One expert's span of a shard as a tensor of bytes, for Checkpoint::map.
format::TensorInfo expert_span_tensor(const format::ExpertSpan& span) {
  return {base::str_cat("layer ", span.layer, " expert ", span.expert),
          format::DType::kU8,
          {static_cast<int64_t>(span.nbytes)},
          span.file,
          span.offset,
          span.nbytes};
}

// The same spans the model's own mapped store uses, for a store we wrap in a trace.
std::unique_ptr<experts::ExpertStore> mapped_store(const format::Checkpoint& checkpoint,
                                                   const experts::ExpertCatalog& catalog) {
  const format::Checkpoint* ckpt = &checkpoint;
  return std::make_unique<experts::MappedExpertStore>(
      catalog, [ckpt](const format::ExpertSpan& span) {
        return ckpt->map(expert_span_tensor(span)).data();
      });
}

// Every weight a token multiplies, where it is mapped, in the order a pass needs them: the spine
// layers (every token needs all of them), the global tensors (the lm_head comes last in a pass),
// then the experts layer by layer. Not the embedding, of which a token reads one row.
std::vector<io::PageCacheWarmer::Range> mapped_weights(
    const model::Model& model, const std::vector<model::SpineLayerReads>& reads,
    const std::vector<const format::TensorInfo*>& globals) {
  const format::Checkpoint& ckpt = model.checkpoint();
  std::vector<io::PageCacheWarmer::Range> out;
  auto add = [&](const format::TensorInfo& t) {
    const std::span<const uint8_t> bytes = ckpt.map(t);
    out.push_back({bytes.data(), bytes.size()});
  };
  for (const model::SpineLayerReads& layer : reads) {
    std::vector<const format::TensorInfo*> tensors;
    for (const auto& [t, offset] : layer.tensor_offset) tensors.push_back(t);
    // The map's order is arbitrary; file order keeps the warm-up's reads sequential.
    std::sort(tensors.begin(), tensors.end(), [](const auto* a, const auto* b) {
      return std::tie(a->file, a->offset) < std::tie(b->file, b->offset);
    });
    for (const format::TensorInfo* t : tensors) add(*t);
  }
  for (const format::TensorInfo* t : globals) add(*t);
  for (const experts::ExpertCatalog::Layer& layer : model.expert_catalog().layers) {
    for (const format::ExpertSpan& span : layer.spans) add(expert_span_tensor(span));
  }
  return out;
}

}  // namespace

std::unique_ptr<Streaming> Streaming::load(const EngineOptions& options,
                                           std::vector<DrafterCost> drafters) {
  const ExpertSource& source = options.expert_source;
  // The experts of an expert source live outside the checkpoint (in cache files, perhaps not
  // fetched yet), so only the streaming store can serve them.
  if (source.catalog && options.experts == ExpertMode::kMapped) {
    base::fail(options.model_dir,
               " is a streaming install: its experts are fetched on demand into cache files, "
               "which cannot be mapped before they exist; use --experts stream or auto (or "
               "`deltafin setup --full` for a full install)");
  }
  std::unique_ptr<Streaming> s(new Streaming());
  s->model_ = model::Model::build(
      options.model_dir,
      source.catalog ? std::optional<experts::ExpertCatalog>(*source.catalog) : std::nullopt,
      [&](const model::ModelPlan& plan, const format::Checkpoint& ckpt,
          const experts::ExpertCatalog& catalog) {
        return s->make_stores(plan, ckpt, catalog, options, drafters);
      },
      options.spine_dtype == SpineDType::kInt8);
  // Everything mapped and within the budget: bring the weights in behind the first tokens instead
  // of inside their GEMVs, a fault at a time.
  if (s->info_.warming) {
    s->warmer_ = std::make_unique<io::PageCacheWarmer>(
        mapped_weights(*s->model_, s->warm_reads_, s->warm_globals_));
    s->warm_reads_.clear();
    s->warm_globals_.clear();
    base::log_info("mapped weights: bringing them into memory in the background");
  }
  return s;
}

model::ModelStores Streaming::make_stores(const model::ModelPlan& plan,
                                          const format::Checkpoint& ckpt,
                                          const experts::ExpertCatalog& catalog,
                                          const EngineOptions& options,
                                          const std::vector<DrafterCost>& drafters) {
  const std::shared_ptr<experts::ExpertFetcher>& fetcher = options.expert_source.fetcher;
  const base::MemoryBudget budget = base::memory_budget(options.memory_budget);
  std::vector<model::SpineLayerReads> reads = model::spine_layer_reads(plan, ckpt);
  std::vector<const format::TensorInfo*> globals = model::global_spine_tensors(plan, ckpt);
  TierInputs in;
  in.budget_bytes = budget.budget_bytes;
  in.process_bytes = base::current_rss_bytes();
  in.working_bytes = working_bytes(plan, options.attention_chunk_tokens,
                                   options.prefill_group_tokens, options.max_context_tokens);
  in.context_bytes = context_bytes(plan, options.max_context_tokens);
  in.max_context_tokens = options.max_context_tokens;
  for (const format::TensorInfo* t : globals) in.global_bytes += t->nbytes;
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    in.layer_bytes.push_back(reads[l].read_bytes);
    const model::LayerPlan& lp = plan.layers[l];
    if (lp.moe() != nullptr && options.prefetch) {
      in.lookahead_bytes += lp.moe()->router.nbytes();
    }
  }
  for (const experts::ExpertCatalog::Layer& layer : catalog.layers) {
    for (const format::ExpertSpan& span : layer.spans) in.expert_bytes += span.nbytes;
    in.n_experts += static_cast<int64_t>(layer.spans.size());
  }
  in.slot_bytes = in.n_experts > 0 ? experts::StreamingExpertStore::slot_bytes(catalog) : 0;
  in.min_slots = 2 * plan.moe_shape.router.top_k;
  // A mapping needs every expert's file in place; a streaming install has them only once fetched.
  in.experts = options.expert_source.catalog ? ExpertMode::kStream : options.experts;
  // Copies placed over drives are read by the streaming store (docs/DRIVES.md), a streaming
  // install's included.
  std::shared_ptr<const experts::Placement> placement = experts::load_placement(options.model_dir);
  if (placement && in.experts == ExpertMode::kAuto) in.experts = ExpertMode::kStream;
  if (placement && in.experts == ExpertMode::kMapped)
    base::log_info("--experts mapped: the copies placed by ", placement->manifest_path,
                   " are not read (the shards are mapped)");
  in.spine = options.spine;
  in.forced_slots = options.expert_slots;
  in.experts_per_pass = plan.moe_shape.router.top_k * static_cast<int64_t>(catalog.layers.size());
  in.drafters = drafters;
  const TierPlan tiers = plan_tiers(in);
  // The lossy int8 spine names itself in the startup message (and so wherever that is shown).
  const std::string summary =
      (ckpt.overlay() != nullptr ? "int8 spine (lossy, --spine-dtype int8): " : "") +
      describe_tiers(in, tiers, budget.source);
  if (ckpt.overlay() != nullptr)
    base::log_warn("--spine-dtype int8: the spine's 2-D BF16 weights run as per-row int8 from ",
                   ckpt.overlay()->dir(),
                   ": lossy, tokens may differ from the release's (docs/QUALITY.md)");
  if (tiers.within_budget) {
    base::log_info(summary);
  } else {
    base::log_warn(summary);
  }

  MemoryPlanInfo& info = info_;
  info.budget_bytes = budget.budget_bytes;
  info.streaming = !tiers.experts_mapped;
  info.resident_spine_bytes = tiers.resident_spine_bytes;
  info.global_bytes = in.global_bytes;
  info.streamed_layers = tiers.n_streamed;
  info.streamed_spine_bytes_per_pass = tiers.streamed_bytes_per_pass;
  info.expert_slots = tiers.n_slots;
  info.expert_slot_bytes = in.slot_bytes;
  for (const experts::ExpertCatalog::Layer& layer : catalog.layers)
    info.expert_span_bytes = std::max(info.expert_span_bytes, layer.layout.span_bytes);
  info.context_bytes = in.context_bytes;
  info.read_depth = options.read_depth;
  info.read_piece_bytes = options.read_piece_bytes;
  info.prefill_group_tokens = options.prefill_group_tokens;
  info.summary = summary;
  for (size_t i = 0; i < drafters.size(); ++i)
    if (tiers.drafter_loaded[i]) info.drafters.push_back(drafters[i].name);
  info.drafter_bytes = tiers.drafter_bytes;
  if (!drafters.empty()) base::log_info(describe_drafters(in, tiers));

  model::ModelStores stores;
  if (!tiers.experts_mapped || tiers.n_streamed > 0)
    scheduler_ = std::make_shared<io::ReadScheduler>(
        options.read_depth, io::QueueKind::kAuto,
        placement ? static_cast<int>(placement->dirs.size()) + 1 : 1);
  base::Stopwatch load_time;
  if (!tiers.experts_mapped) {
    experts::StreamingStoreOptions so;
    so.n_slots = tiers.n_slots;
    so.max_prefetch_slots = plan.moe_shape.router.top_k;
    so.read_piece_bytes = static_cast<size_t>(options.read_piece_bytes);
    so.policy = options.cache == ExpertCachePolicy::kLru ? experts::CachePolicy::kLru
                                                         : experts::CachePolicy::kLfu;
    so.placement = placement;
    stores.experts =
        std::make_unique<experts::StreamingExpertStore>(catalog, scheduler_, so, fetcher);
    // A guess only pays with disk time nothing else wants. A streamed spine keeps the disk busy
    // for the whole pass, so guesses could only add reads (docs/STREAMING.md, measured).
    info.lookahead = options.prefetch && tiers.n_streamed == 0;
    stores.lookahead = info.lookahead;
    if (options.prefetch && tiers.n_streamed > 0)
      base::log_info("lookahead off: the streamed spine leaves the disk no idle time to fill");
  } else if (!options.trace_routes.empty()) {
    stores.experts = mapped_store(ckpt, catalog);
  }
  {
    // A mapped model's faults are not counted as waits, so auto keeps every thread there; a fixed
    // count applies to any model.
    const int pool = base::default_pool().size();
    const model::LayerThreads threads(pool,
                                      options.layer_threads < 0 ? pool : options.layer_threads);
    stores.layer_threads = threads;
    if (options.layer_threads > 0) {
      base::log_info("layers: ", threads.for_pass(model::PassKind::kDecode), " of ", pool,
                     " threads");
    } else if (options.layer_threads == 0 && scheduler_) {  // something is read
      base::log_info("layers: ", pool, " threads, ", threads.reduced_threads(),
                     " after a token that waited on its reads (--layer-threads)");
    }
  }
  if (stores.experts && !options.trace_routes.empty())
    stores.experts = std::make_unique<experts::RouteTracingStore>(std::move(stores.experts),
                                                                  options.trace_routes);

  // Not with --no-prefetch, which is the plain mmap path the benchmarks compare against.
  info.warming =
      tiers.experts_mapped && tiers.n_streamed == 0 && tiers.within_budget && options.prefetch;
  if (info.warming) {
    warm_reads_ = std::move(reads);
    warm_globals_ = std::move(globals);
  }

  // With experts mapped and every layer resident the mapping stays the spine's home; otherwise
  // the spine moves into memory we own: resident layers and globals are read now, the rest
  // streams.
  if (!tiers.experts_mapped || tiers.n_streamed > 0) {
    const double slots_seconds = load_time.lap_seconds();
    stores.spine = std::make_unique<model::StreamedSpine>(plan, ckpt, std::move(reads),
                                                          tiers.resident, globals, scheduler_);
    stores.spine_globals = std::move(globals);
    base::log_info("expert slots allocated in ", slots_seconds, " s; resident spine (",
                   base::format_bytes(stores.spine->resident_bytes()), ") read in ",
                   load_time.lap_seconds(), " s");
    spine_ = stores.spine.get();
  }
  return stores;
}

StreamStats Streaming::stats() const {
  StreamStats out;
  const experts::ExpertStoreStats e = model_->expert_store().stats();
  out.expert_bytes_read = e.bytes_read;
  out.needed_bytes = e.needed_bytes;
  out.experts_requested = e.experts_requested;
  out.cache_hits = e.cache_hits;
  out.prefetch_hits = e.prefetch_hits;
  out.demand_reads = e.demand_reads;
  out.prefetch_reads = e.prefetch_reads;
  out.prefetch_wasted = e.prefetch_wasted;
  out.prefetch_cancelled = e.prefetch_cancelled;
  out.prefetch_stopped = e.prefetch_stopped;
  out.predicted_actual = e.predicted_actual;
  out.predicted_matched = e.predicted_matched;
  out.expert_wait_seconds = e.wait_seconds;
  if (spine_ != nullptr) {
    const model::SpineStats sp = spine_->stats();
    out.spine_bytes_read = sp.bytes_read;
    out.spine_wait_seconds = sp.wait_seconds;
    out.needed_bytes += sp.passes * spine_->streamed_bytes_per_pass();
  }
  if (scheduler_) {
    out.disk_busy_seconds = scheduler_->stats().busy_seconds;
    for (const io::DriveStats& d : scheduler_->drives().stats())
      out.drives.push_back({d.name, d.bytes, d.busy_seconds, d.ceiling_gbps});
  }
  out.layer_threads = model_->last_layer_threads();
  return out;
}

}  // namespace deltafin::runtime
