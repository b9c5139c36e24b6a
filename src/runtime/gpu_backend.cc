// The device choice and, in a CUDA build, the GPU backend: the model mapped on the host, bound
// (gpu_bind.h), planned by tiers against free VRAM or --vram-budget, placed; sessions own a
// device sequence.
#include "runtime/gpu_backend.h"

#include <charconv>

#include "base/error.h"
#include "base/memory_budget.h"

#if DELTAFIN_WITH_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda/gpu_counters.h"
#include "cuda/gpu_tiers.h"
#include "cuda/pinned_host.h"
#include "experts/streaming_expert_store.h"
#include "io/read_scheduler.h"
#include "runtime/gpu_bind.h"
#include "runtime/speculator.h"
#endif

namespace deltafin::runtime {

DeviceRequest parse_device(const std::string& text) {
  DeviceRequest r;
  if (text.empty() || text == "auto") return r;
  if (text == "cpu") {
    r.kind = DeviceRequest::Kind::kCpu;
    return r;
  }
  if (text == "cuda") {
    r.kind = DeviceRequest::Kind::kCuda;
    return r;
  }
  if (text.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* b = text.data() + 5;
    const char* e = text.data() + text.size();
    const auto [end, ec] = std::from_chars(b, e, index);
    if (ec == std::errc() && end == e && b != e && index >= 0) {
      r.kind = DeviceRequest::Kind::kCuda;
      r.index = index;
      return r;
    }
  }
  base::fail("--device ", text, ": expected auto, cpu, cuda or cuda:N");
}

#if DELTAFIN_WITH_CUDA
namespace {

class CudaSession : public GpuSession {
 public:
  CudaSession(cuda::GpuModel& model) : model_(model), seq_(model.new_sequence()) {}
  void forward(std::span<const int32_t> ids, bool all_rows, float* logits, bool tentative,
               const std::function<bool()>* cancel) override {
    try {
      model_.forward(*seq_, ids.data(), static_cast<int64_t>(ids.size()), all_rows, logits,
                     tentative, cancel);
    } catch (const cuda::GpuPassCancelled&) {
      throw model::PassCancelled{};
    } catch (const std::invalid_argument& e) {
      base::fail(e.what());
    }
  }
  void commit(int64_t keep) override { model_.commit(*seq_, keep); }
  std::pmr::memory_resource* host_memory() override {
    return cuda::pinned_host_memory(model_.device());
  }
  void reset() override { model_.reset(*seq_); }
  int64_t n_positions() const override { return seq_->n_positions(); }

 private:
  cuda::GpuModel& model_;
  std::unique_ptr<cuda::GpuSequence> seq_;
};

class CudaBackend : public GpuBackend {
 public:
  CudaBackend(std::unique_ptr<model::Model> host, std::unique_ptr<cuda::GpuModel> gpu,
              MemoryPlanInfo info, std::shared_ptr<io::ReadScheduler> scheduler,
              const experts::StreamingExpertStore* store)
      : host_(std::move(host)),
        scheduler_(std::move(scheduler)),
        gpu_(std::move(gpu)),
        info_(std::move(info)),
        store_(store) {}
  model::Model& model() override { return *host_; }
  std::unique_ptr<GpuSession> new_session() override {
    return std::make_unique<CudaSession>(*gpu_);
  }
  const MemoryPlanInfo& info() const override { return info_; }
  StreamStats tier_stats() const override {
    const cuda::GpuTierStats t = gpu_->tier_stats();
    StreamStats s;
    s.experts_requested = t.expert_hits + t.expert_misses;
    s.cache_hits = t.expert_hits;
    s.gpu_passes = t.passes;
    s.gpu_resident_spine_bytes = t.resident_spine_bytes;
    s.gpu_streamed_spine_bytes = t.streamed_spine_bytes;
    s.gpu_expert_hits = t.expert_hits;
    s.gpu_expert_misses = t.expert_misses;
    s.gpu_expert_hit_bytes = t.expert_hit_bytes;
    s.gpu_expert_miss_bytes = t.expert_miss_bytes;
    s.gpu_expert_ram_hits = t.source.ram_hits;
    s.gpu_expert_ram_hit_bytes = t.source.ram_hit_bytes;
    s.gpu_expert_disk_reads = t.source.disk_reads;
    s.gpu_expert_disk_bytes = t.source.disk_bytes;
    s.gpu_spine_h2d_seconds = t.spine_h2d_seconds;
    s.gpu_expert_h2d_seconds = t.expert_h2d_seconds;
    s.gpu_spine_fill_wait_seconds = t.spine_fill_wait_seconds;
    s.gpu_expert_source_wait_seconds = t.source.wait_seconds;
    if (store_ != nullptr) {  // the disk's figures, as the CPU backend reports them
      const experts::ExpertStoreStats e = store_->stats();
      s.expert_bytes_read = e.bytes_read;
      s.needed_bytes = e.needed_bytes;
      s.demand_reads = e.demand_reads;
      s.expert_wait_seconds = e.wait_seconds;
    }
    if (scheduler_) {
      s.disk_busy_seconds = scheduler_->stats().busy_seconds;
      for (const io::DriveStats& d : scheduler_->drives().stats())
        s.drives.push_back({d.name, d.bytes, d.busy_seconds, d.ceiling_gbps});
    }
    return s;
  }
  GpuStats pass_counters() const override { return gpu_->counters(); }

 private:
  std::unique_ptr<model::Model> host_;
  std::shared_ptr<io::ReadScheduler> scheduler_;  // --experts stream: the disk's reads
  std::unique_ptr<cuda::GpuModel> gpu_;           // before the scheduler goes
  MemoryPlanInfo info_;
  const experts::StreamingExpertStore* store_;  // owned by gpu_'s expert source, or null
};

// Held back from --memory-budget for the host side of the passes (logits, ids, sessions).
constexpr uint64_t kHostReserveBytes = uint64_t{512} << 20;

void check_err(cudaError_t err) {
  if (err != cudaSuccess) base::fail("CUDA: ", cudaGetErrorString(err));
}

}  // namespace

std::unique_ptr<GpuBackend> load_gpu_backend(const EngineOptions& options, int64_t max_context,
                                             std::string* why) {
  const DeviceRequest req = parse_device(options.device);
  if (req.kind == DeviceRequest::Kind::kCpu) {
    why->clear();
    return nullptr;
  }
  const bool must = req.kind == DeviceRequest::Kind::kCuda;
  // auto falls back to the CPU saying why; cuda makes the same reason an error.
  const auto refuse = [&](const std::string& reason) -> std::unique_ptr<GpuBackend> {
    if (must) base::fail("--device ", options.device, ": ", reason);
    *why = reason;
    return nullptr;
  };
  // Options only the CPU path has: asked for explicitly, they say where to run (auto stays on the
  // CPU rather than ignoring them; cuda refuses them, with or without a GPU).
  if (options.spine == SpineMode::kStream)
    return refuse("--spine stream streams the spine through RAM on the CPU backend");
  // --experts stream|mapped and --expert-slots (the RAM tier) say where auto runs: the CPU, as
  // always; `--device cuda` takes them for its expert cache's misses.
  if (options.experts != ExpertMode::kAuto && !must)
    return refuse(
        "--experts mapped|stream chooses how the CPU backend holds the experts (with "
        "--device cuda it chooses where the GPU's expert cache's misses come from)");
  const bool stream_experts = options.experts == ExpertMode::kStream;
  if (options.expert_slots > 0 && !stream_experts)
    return refuse(
        "--expert-slots sizes the CPU backend's expert cache (on the GPU: the RAM tier of "
        "--experts stream)");
  if (!options.trace_routes.empty())
    return refuse("--trace-routes records the CPU backend's routes");
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return refuse(base::str_cat("no CUDA device (",
                                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")"));
  const int device = req.index < 0 ? 0 : req.index;
  if (device >= count)
    return refuse(base::str_cat("no CUDA device ", device, " (", count, " present)"));
  if (options.spine_dtype != SpineDType::kBf16)
    return refuse("the int8 spine runs on the CPU backend only (--spine-dtype bf16 for the GPU)");
  if (options.expert_source.catalog)
    return refuse(
        "a streaming install's experts are not all local; the CUDA backend copies experts "
        "from the local checkpoint");
  std::unique_ptr<model::Model> host = model::Model::load(options.model_dir);
  cuda::GpuModelDesc desc;
  try {
    desc = bind_gpu_model(*host);
    cuda::check_gpu_shapes(desc);
  } catch (const base::Error& e) {
    return refuse(e.what());
  } catch (const std::invalid_argument& e) {
    return refuse(e.what());
  }
  cuda::GpuLimits limits;
  limits.max_positions = max_context;
  limits.max_tentative_rows = kMaxVerifyRows;
  limits.resident_layers = options.vram_spine_layers;
  limits.expert_slots = options.vram_expert_slots;
  limits.mxfp4_tensor_cores = options.gpu_expert_math == GpuExpertMath::kTensorCores;
  cudaDeviceProp prop{};
  check_err(cudaGetDeviceProperties(&prop, device));
  size_t free_bytes = 0, total_bytes = 0;
  check_err(cudaSetDevice(device));
  check_err(cudaMemGetInfo(&free_bytes, &total_bytes));
  const uint64_t budget =
      options.vram_budget.empty() ? free_bytes : base::parse_byte_size(options.vram_budget);
  const std::string budget_text =
      options.vram_budget.empty()
          ? base::str_cat(base::format_bytes(free_bytes), " free on cuda:", device)
          : base::str_cat("--vram-budget ", options.vram_budget);
  // The GPU runs the model when its tiers have a plan: the working set, the spine staging and
  // one row's experts fit (everything else streams from host memory).
  cuda::TierPlan tiers;
  try {
    tiers = cuda::plan_tiers(desc, limits, budget);
  } catch (const std::exception& e) {
    return refuse(
        base::str_cat(e.what(), " (the budget: ", budget_text, "; --device cpu runs on the CPU)"));
  }
  // Host memory: the pinned buffers the tiers need, then (--experts stream) the RAM tier of
  // experts, all within --memory-budget less what the process holds now.
  const base::MemoryBudget ram = base::memory_budget(options.memory_budget);
  const uint64_t rss = base::current_rss_bytes() + kHostReserveBytes;
  const uint64_t host_left = ram.budget_bytes > rss ? ram.budget_bytes - rss : 0;
  const bool cache = !tiers.whole && tiers.expert_slots > 0;
  if (cache && stream_experts) tiers.expert_staging_bytes = 0;  // copied out of the RAM tier
  try {
    cuda::check_host_tiers(tiers, host_left);
  } catch (const std::exception& e) {
    return refuse(base::str_cat(e.what(), " (the budget: ", base::format_bytes(ram.budget_bytes),
                                ", ", ram.source, "; the process holds ",
                                base::format_bytes(rss - kHostReserveBytes), ")"));
  }
  std::unique_ptr<cuda::ExpertSource> source;
  std::shared_ptr<io::ReadScheduler> scheduler;
  const experts::StreamingExpertStore* store = nullptr;
  int ram_slots = 0;
  uint64_t ram_tier_bytes = 0;
  const experts::ExpertCatalog& catalog = host->expert_catalog();
  if (cache && stream_experts) {
    const uint64_t slot = experts::StreamingExpertStore::slot_bytes(catalog);
    const int64_t min_slots = 2 * desc.shape.router.top_k;
    const uint64_t left = host_left - tiers.pinned_host_bytes();
    int64_t slots = options.expert_slots > 0
                        ? options.expert_slots
                        : std::min<int64_t>(tiers.n_experts, static_cast<int64_t>(left / slot));
    if (options.expert_slots <= 0 && slots < min_slots)
      return refuse(base::str_cat("the RAM tier of experts (--experts stream) needs at least ",
                                  min_slots, " slots of ", base::format_bytes(slot),
                                  " (two routes), ", base::format_bytes(min_slots * slot),
                                  "; --memory-budget leaves ", base::format_bytes(left),
                                  " after the pinned buffers: raise --memory-budget"));
    if (options.expert_slots > 0 && static_cast<uint64_t>(slots) * slot > left)
      return refuse(base::str_cat(
          "the RAM tier of experts (--expert-slots ", slots, ", ", base::format_bytes(slots * slot),
          ") does not fit the ", base::format_bytes(left),
          " --memory-budget leaves after the pinned buffers: lower --expert-slots or raise "
          "--memory-budget"));
    slots = std::max<int64_t>(slots, 2);
    ram_slots = static_cast<int>(slots);
    scheduler = std::make_shared<io::ReadScheduler>(std::max(1, options.read_depth));
    experts::StreamingStoreOptions so;
    so.n_slots = ram_slots;
    so.max_prefetch_slots = static_cast<int>(desc.shape.router.top_k);
    so.read_piece_bytes = static_cast<size_t>(options.read_piece_bytes);
    so.policy = options.cache == ExpertCachePolicy::kLru ? experts::CachePolicy::kLru
                                                         : experts::CachePolicy::kLfu;
    try {
      source = streaming_expert_source(*host, so, scheduler, &store);
    } catch (const base::Error& e) {
      return refuse(e.what());
    }
    ram_tier_bytes = store->pool_bytes();
  }
  std::unique_ptr<cuda::GpuModel> gpu;
  try {
    gpu = std::make_unique<cuda::GpuModel>(desc, device, limits, tiers, std::move(source));
  } catch (const std::exception& e) {
    return refuse(e.what());
  }
  MemoryPlanInfo info;
  info.device = base::str_cat("cuda:", device);
  info.vram_bytes = tiers.total();
  info.context_bytes = tiers.sequence_bytes;
  info.vram_resident_layers = tiers.resident_layers;
  info.vram_streamed_layers = tiers.streamed_layers();
  info.vram_resident_spine_bytes = tiers.resident_spine_bytes;
  info.vram_streamed_spine_bytes = tiers.streamed_spine_bytes;
  info.vram_expert_slots = tiers.whole ? 0 : tiers.expert_slots;
  info.vram_expert_slot_bytes = tiers.expert_slot_bytes;
  info.gpu_pinned_host_bytes = tiers.pinned_host_bytes() + ram_tier_bytes;
  info.budget_bytes = ram.budget_bytes;
  info.read_depth = options.read_depth;
  info.read_piece_bytes = options.read_piece_bytes;
  std::string misses;
  if (cache && store != nullptr) {
    info.streaming = true;
    info.expert_slots = ram_slots;
    info.expert_slot_bytes = experts::StreamingExpertStore::slot_bytes(catalog);
    for (const experts::ExpertCatalog::Layer& l : catalog.layers)
      info.expert_span_bytes = std::max(info.expert_span_bytes, l.layout.span_bytes);
    misses = base::str_cat(" from a RAM tier of ", ram_slots, " experts (",
                           base::format_bytes(ram_tier_bytes), ", pinned, ",
                           options.cache == ExpertCachePolicy::kLru ? "LRU" : "LFU",
                           ") that O_DIRECT reads of the shards fill");
  } else if (cache) {
    misses = " (the mapping, through pinned staging)";
  }
  info.summary = base::str_cat(
      "device cuda:", device, " (", prop.name, "): VRAM ", cuda::describe_tiers(tiers), misses,
      ", of ", budget_text, "; context ", max_context, " positions; pinned host memory ",
      base::format_bytes(info.gpu_pinned_host_bytes), " of --memory-budget ",
      base::format_bytes(ram.budget_bytes),
      limits.mxfp4_tensor_cores ? "; MXFP4 on the tensor cores (--gpu-expert-math tensor: "
                                  "not the exact kernels' bits)"
                                : "");
  return std::make_unique<CudaBackend>(std::move(host), std::move(gpu), std::move(info),
                                       std::move(scheduler), store);
}

#else

std::unique_ptr<GpuBackend> load_gpu_backend(const EngineOptions& options, int64_t,
                                             std::string* why) {
  const DeviceRequest req = parse_device(options.device);
  if (req.kind == DeviceRequest::Kind::kCuda)
    base::fail("--device ", options.device,
               ": this deltafin was built without the CUDA backend (no nvcc at configure time, or "
               "-DDELTAFIN_CUDA=OFF)");
  why->clear();  // nothing to say: a build without CUDA runs on the CPU as it always has
  return nullptr;
}

#endif

}  // namespace deltafin::runtime
