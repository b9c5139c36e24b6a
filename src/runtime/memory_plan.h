// The memory plan: given the budget and what each tier costs, which spine layers stay resident,
// which stream, and how many expert slots (routes, prefetch, cache) the rest pays for. RAM goes
// where it saves the most bytes per token: a resident spine layer saves its whole size every
// token, an expert cache byte saves only top_k / n_experts of it under flat routing, so the spine
// is served first and the cache gets what remains.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deltafin/engine.h"

namespace deltafin::runtime {

// A model drafter the plan may load (runtime/model_drafters.h): its RAM against what it saves.
struct DrafterCost {
  std::string name;
  uint64_t bytes = 0;  // its weights (borrowed target tensors excluded) and one session's context
  // The share of each pass's disk reads it is expected to save per generated id: a prior from
  // published acceptance (model_drafters.h), since acceptance is only measured once it runs.
  double saved_fraction = 0.0;
  bool forced = false;  // asked for by name: loaded whatever it saves, when it fits at all
};

struct TierInputs {
  uint64_t budget_bytes = 0;
  uint64_t process_bytes = 0;  // RSS before any tier: binary, heap, the plan's small vectors
  uint64_t working_bytes = 0;  // activations, sequence state, scratch
  uint64_t context_bytes = 0;  // attention caches of one session at max_context_tokens
  int64_t max_context_tokens = 0;
  uint64_t global_bytes = 0;          // lm_head and the final norms: always resident
  std::vector<uint64_t> layer_bytes;  // per layer: what reading its spine takes
  uint64_t lookahead_bytes = 0;       // mapped router pages the lookahead reads (all MoE layers)
  uint64_t expert_bytes = 0;          // every routed expert
  int64_t n_experts = 0;              // (layer, expert) pairs
  uint64_t slot_bytes = 0;            // one expert slot
  int min_slots = 0;                  // a route plus prefetch room
  ExpertMode experts = ExpertMode::kAuto;
  SpineMode spine = SpineMode::kAuto;
  int forced_slots = 0;               // > 0: exactly this many slots
  int64_t experts_per_pass = 0;       // routed experts one row reads: top_k × MoE layers
  std::vector<DrafterCost> drafters;  // candidates, in order of preference
};

struct TierPlan {
  bool experts_mapped = false;
  std::vector<bool> resident;  // per layer
  uint64_t resident_spine_bytes = 0;
  int64_t n_streamed = 0;
  uint64_t streamed_bytes_per_pass = 0;
  uint64_t stream_buffer_bytes = 0;  // two buffers of the largest streamed layer
  int n_slots = 0;
  uint64_t slot_pool_bytes = 0;
  uint64_t planned_bytes = 0;  // everything above plus process, working, globals, lookahead
  bool within_budget = true;   // false only for mapped experts larger than the budget
  // Per TierInputs::drafters: loaded or not, and why (for the startup log).
  std::vector<bool> drafter_loaded;
  std::vector<std::string> drafter_reasons;
  uint64_t drafter_bytes = 0;  // of the loaded ones, within planned_bytes
};

// Throws base::Error when the budget cannot hold even the smallest streaming configuration
// (saying what that needs), or for a forced slot count below 2.
TierPlan plan_tiers(const TierInputs& in);

// The startup message: budget and its source, each tier's bytes, what streams.
std::string describe_tiers(const TierInputs& in, const TierPlan& plan,
                           const std::string& budget_source);

// Bytes one row's pass is expected to read from disk under `plan`: the streamed spine layers and
// the routed experts that miss the slot cache (flat routing: a hit is as likely as the cache's
// share of the experts). 0 when everything is mapped.
double disk_bytes_per_pass(const TierInputs& in, const TierPlan& plan);

// The startup line about the drafters: each candidate, its bytes, loaded or not and why.
std::string describe_drafters(const TierInputs& in, const TierPlan& plan);

// Rounded up to whole 2 MiB pages, as huge-page buffers are allocated.
uint64_t huge_rounded(uint64_t bytes);

}  // namespace deltafin::runtime
