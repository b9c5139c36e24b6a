// The public entry point: load a model folder, describe it, open sessions on it, and reach its
// text side (tokenizer, chat format). The CLI and the server use only this API; it carries text,
// ids and logits, never tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deltafin/gpu_stats.h"
#include "deltafin/session.h"
#include "deltafin/text.h"

namespace deltafin {

namespace experts {
struct ExpertCatalog;
class ExpertFetcher;
}  // namespace experts

// Routed experts that the checkpoint in the model folder does not hold (a streaming install keeps
// only the spine): where each one's bytes are, and how to fetch one that is not local yet. Opaque
// to the API's users: the apps get it from setup (apps/load_engine.h), the engine reads it.
struct ExpertSource {
  std::shared_ptr<const experts::ExpertCatalog> catalog;  // null: the checkpoint's own experts
  std::shared_ptr<experts::ExpertFetcher> fetcher;        // null: every span is local
};

// Where routed experts come from: the checkpoint's mapping (page cache) or explicit O_DIRECT
// reads into a slot pool sized from the memory budget. kAuto maps when the whole model fits.
enum class ExpertMode { kAuto, kMapped, kStream };
// kAuto keeps as many spine layers resident as the budget allows; kStream streams every layer
// (tests, and machines where the spine must not stay in memory).
enum class SpineMode { kAuto, kStream };
// The precision the spine's 2-D BF16 weights are used in. kBf16 is the release's (exact); kInt8 is
// the lossy opt-in (--spine-dtype int8, issue #21): per-row int8 copies written by `deltafin
// convert-spine --int8` into MODEL/spine-int8/, smaller to keep and to stream. Everything that
// names the model says so while it is on (ModelInfo::lossy, docs/QUALITY.md).
enum class SpineDType { kBf16, kInt8 };
const char* spine_dtype_name(SpineDType dtype);  // "bf16", "int8"

// How the CUDA backend multiplies MXFP4 weights (--gpu-expert-math). kExact: the fp32 FMA chain
// the exactness contract fixes (docs/CUDA.md "Exactness"). kTensorCores, an opt-in: the tensor
// cores, on exact BF16 splits of the fp32 activations with fp32 accumulation in the tensor cores'
// own rounding, faster at several rows per pass; results differ from kExact's in the last bits
// but stay independent of how many rows a pass holds, so speculation stays lossless (docs/CUDA.md
// "Tensor-core experts"). The CPU backend has one arithmetic: it says so at load and goes on.
enum class GpuExpertMath { kExact, kTensorCores };

// Which cached expert a new read replaces: least frequently requested (then least recently), or
// least recently requested. docs/STREAMING.md has the measurements behind the default.
enum class ExpertCachePolicy { kLfu, kLru };
// Which model drafters in MODEL/drafters/ the engine loads (docs/SPECULATION.md): kAuto those the
// memory plan finds worth their memory, kOff none, kDSpark / kQwen that one whatever it saves
// (an error when it does not fit or does not load).
enum class DrafterLoad { kAuto, kOff, kDSpark, kQwen };

// The context reserved when EngineOptions::max_context_tokens is 0: K3 keeps 55 KiB of MLA cache
// per position, so 32768 positions take 1.8 GiB of the budget.
inline constexpr int64_t kDefaultMaxContext = 32768;
// Reads in flight: the 2-vCPU machine's disk is saturated from depth 2 (docs/IO.md); 4 leaves
// headroom for devices that want more without hurting that one.
inline constexpr int kDefaultReadDepth = 4;
// 512 prompt rows per pass: a pass of that many rows touches nearly all of each K3 layer's
// experts, so a streamed prefill reads each expert and each streamed spine layer once for many
// more rows than a 64-row chunk would (docs/PERFORMANCE.md, "Prefill of a streamed prompt").
inline constexpr int kDefaultPrefillGroup = 512;

struct EngineOptions {
  std::string model_dir;
  int attention_chunk_tokens = 64;  // rows per attention pass (--chunk): the attention chunk
  // Prompt rows per pass through the layers (0: kDefaultPrefillGroup), rounded down to a multiple
  // of attention_chunk_tokens: attention still runs chunk by chunk, so results do not depend on it,
  // but each weight and each routed expert is read once per group instead of once per chunk.
  int prefill_group_tokens = 0;
  std::string memory_budget;  // "24G", "512M"...; empty: cgroup limit / MemAvailable - reserve
  ExpertMode experts = ExpertMode::kAuto;
  SpineMode spine = SpineMode::kAuto;
  int expert_slots = 0;  // > 0: this many expert slots instead of what the budget gives
  bool prefetch = true;  // next-layer router lookahead (streamed experts); warm-up (mapped ones)
  int read_depth = 0;    // O_DIRECT requests in flight at once; 0: kDefaultReadDepth
  // > 0 (a multiple of 4 KiB): each expert is read in requests of this size, so a guess the route
  // did not pick stops at its next piece. 0: one request per expert (docs/PERFORMANCE.md has
  // what pieces did and did not buy).
  int64_t read_piece_bytes = 0;
  ExpertCachePolicy cache = ExpertCachePolicy::kLfu;
  // Threads the layers of a pass run on (the lm_head always gets them all). 0: auto, half the pool
  // for decode tokens after one that waited on its reads (streamed experts or spine) for a quarter
  // of its time, since reads slow while the CPU draws on memory bandwidth; -1: every thread; > 0:
  // that many, for any model. Results are the same bit for bit whatever the choice.
  int layer_threads = 0;
  std::string trace_routes;  // when set, one JSON line per pass and MoE layer: its experts
  // Positions a session may hold; the memory plan sets aside the attention cache for this many.
  // 0: kDefaultMaxContext, or the model's max_position_embeddings when that is smaller.
  int64_t max_context_tokens = 0;
  ExpertSource expert_source;  // empty: the experts are in the checkpoint
  DrafterLoad drafters = DrafterLoad::kAuto;
  SpineDType spine_dtype = SpineDType::kBf16;
  // Where the passes run (--device): "auto" (the GPU when one is present and its VRAM holds at
  // least the working set, the spine staging and one row's experts, else the CPU), "cpu", "cuda"
  // or "cuda:N" (an error when it cannot be had).
  std::string device = "auto";
  std::string vram_budget;  // "22G"...; empty: the device's free VRAM
  GpuExpertMath gpu_expert_math = GpuExpertMath::kExact;
  // VRAM tiers forced instead of sized from the budget (tests, tuning; docs/CUDA.md): spine
  // layers kept in VRAM (-1: from the budget; the rest stream every pass), and expert cache slots
  // (0: from the budget; >= 1 a cache of that many even when every expert would fit).
  int vram_spine_layers = -1;
  int vram_expert_slots = 0;
};

// What the engine decided at load (also logged then).
struct MemoryPlanInfo {
  uint64_t budget_bytes = 0;
  bool streaming = false;  // experts read explicitly (else mapped)
  bool lookahead = false;  // next-layer route guesses start reads early
  bool warming = false;    // everything mapped: the weights are brought in behind the first tokens
  uint64_t resident_spine_bytes = 0;
  uint64_t global_bytes = 0;  // lm_head and final norms, read in full every pass
  int64_t streamed_layers = 0;
  uint64_t streamed_spine_bytes_per_pass = 0;
  int expert_slots = 0;
  uint64_t expert_slot_bytes = 0;  // per slot
  uint64_t expert_span_bytes = 0;  // one expert's tensors (the largest layer's)
  uint64_t context_bytes = 0;      // attention cache set aside for max_context_tokens positions
  int read_depth = 0;              // O_DIRECT requests in flight at once
  int64_t read_piece_bytes = 0;    // per expert read request; 0: one request per expert
  int prefill_group_tokens = 0;    // prompt rows per pass through the layers
  std::string summary;             // the startup message
  std::string device = "cpu";      // where the passes run: "cpu", "cuda:0"
  uint64_t vram_bytes = 0;         // on the GPU: the model, workspace and one sequence
  // On the GPU, its VRAM tiers (docs/CUDA.md): spine layers in VRAM and those copied in every
  // pass from pinned host memory, and the expert cache (0 slots: every expert resident).
  int64_t vram_resident_layers = 0, vram_streamed_layers = 0;
  uint64_t vram_resident_spine_bytes = 0, vram_streamed_spine_bytes = 0;
  int64_t vram_expert_slots = 0;
  uint64_t vram_expert_slot_bytes = 0;
  // Host memory the GPU tiers pin: the streamed spine's ring, the mapped experts' staging, and
  // the RAM tier of experts (read with O_DIRECT, `--experts stream`; `expert_slots` of them).
  uint64_t gpu_pinned_host_bytes = 0;
  std::vector<std::string> drafters;  // model drafters loaded ("dspark", "qwen3-0.6b-base")
  uint64_t drafter_bytes = 0;         // their weights and one session's context each
};

// Byte and time counters since load; take differences around a token for per-token figures.
// One drive the engine read from (docs/DRIVES.md); cumulative.
struct DriveFigures {
  std::string name;         // the block device ("nvme0n1p2", "loop3")
  uint64_t bytes = 0;       // read from it
  double busy_seconds = 0;  // with at least one read in flight on it
  double ceiling_gbps = 0;  // measured and cached; 0 when not measured yet
};

struct StreamStats {
  uint64_t expert_bytes_read = 0;  // O_DIRECT expert reads, unused prefetches included
  uint64_t spine_bytes_read = 0;   // streamed spine layers
  // Bytes the passes needed from disk: requested experts not in memory from an earlier use, plus
  // every streamed spine layer once per pass. Divided by the device's ceiling: the I/O floor.
  uint64_t needed_bytes = 0;
  uint64_t experts_requested = 0;
  uint64_t cache_hits = 0;
  uint64_t prefetch_hits = 0;
  uint64_t demand_reads = 0;
  uint64_t prefetch_reads = 0;
  uint64_t prefetch_wasted = 0;     // read, evicted unused
  uint64_t prefetch_cancelled = 0;  // dropped before the device
  uint64_t prefetch_stopped = 0;    // missed, stopped part-way through its pieces
  uint64_t predicted_actual = 0;    // lookahead recall = predicted_matched / predicted_actual
  uint64_t predicted_matched = 0;
  double expert_wait_seconds = 0;    // compute blocked on expert reads
  double spine_wait_seconds = 0;     // compute blocked on spine reads
  double disk_busy_seconds = 0;      // time with at least one read in flight
  int layer_threads = 0;             // threads the last pass's layers ran on
  std::vector<DriveFigures> drives;  // by first use; the I/O floor is bytes / sum of ceilings
  // The GPU backend's VRAM tiers (docs/CUDA.md). Hits and misses count a layer's distinct routed
  // experts per device pass (also in experts_requested and cache_hits); bytes in VRAM layout.
  uint64_t gpu_passes = 0;                // device passes (up to 16 rows each)
  uint64_t gpu_resident_spine_bytes = 0;  // spine layers read in VRAM
  uint64_t gpu_streamed_spine_bytes = 0;  // spine layers copied from host memory into VRAM
  uint64_t gpu_expert_hits = 0, gpu_expert_misses = 0;
  uint64_t gpu_expert_hit_bytes = 0;   // read from the VRAM cache
  uint64_t gpu_expert_miss_bytes = 0;  // copied from host memory into the VRAM cache
  // Where the VRAM cache's misses came from: host memory that held them already (the RAM tier,
  // or the mapping when the experts are mapped) or the disk (O_DIRECT reads into the RAM tier).
  uint64_t gpu_expert_ram_hits = 0, gpu_expert_ram_hit_bytes = 0;
  uint64_t gpu_expert_disk_reads = 0, gpu_expert_disk_bytes = 0;
  // Time the host-to-device copies were busy (streamed spine layers, expert misses): bytes over
  // these seconds is the rate each got from the link.
  double gpu_spine_h2d_seconds = 0, gpu_expert_h2d_seconds = 0;
  double gpu_spine_fill_wait_seconds = 0;     // a pass waited for the host ring's fill of a layer
  double gpu_expert_source_wait_seconds = 0;  // a pass waited for a miss's reads or host copy
};

struct ModelInfo {
  std::string arch;  // "kimi_k3", "kimi_linear"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t n_layers = 0;
  int64_t bos_id = -1, eos_id = -1, pad_id = -1;  // -1 when the config names none
  int64_t max_context_tokens = 0;  // positions a session may hold (EngineOptions, resolved)
  // "bf16" (the release's precision) or "int8": then `lossy`, and every place that names the
  // model (startup log, --stats, /v1/models, bench JSON, eval reports) says so.
  std::string spine_dtype = "bf16";
  bool lossy = false;
};

// "-int8-spine" for a lossy engine (appended to the name the server lists), "" for the exact one.
std::string lossy_suffix(const ModelInfo& info);

class Engine {
 public:
  // Loads and checks the model; throws std::runtime_error (deltafin's Error) naming the file,
  // tensor or config field at fault.
  static std::unique_ptr<Engine> load(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const ModelInfo& info() const = 0;
  // A new, empty sequence. Sessions share the engine's weights and must not outlive it.
  virtual std::unique_ptr<Session> new_session() = 0;
  // The folder's tokenizer and its family's chat format, opened on first use (commands that run
  // ids only never need them). Throws std::runtime_error (deltafin's Error) naming the folder
  // when it has no tokenizer or one that does not fit the model. Safe from several threads.
  virtual const Text& text() const = 0;
  virtual MemoryPlanInfo memory_plan() const { return {}; }
  virtual StreamStats stream_stats() const { return {}; }
  virtual GpuStats gpu_stats() const { return {}; }
};

}  // namespace deltafin
