// Tier planning: the mapped shortcut when everything fits, else the largest layers resident
// first (each resident byte saves one read per token whichever layer it is in, and keeping the
// large ones shrinks the two stream buffers), then expert slots from what is left.
#include "runtime/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "base/error.h"
#include "base/memory_budget.h"

namespace deltafin::runtime {
namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

struct Cost {
  uint64_t resident = 0, streamed_max = 0, streamed_total = 0;
  int64_t n_streamed = 0;
  uint64_t total() const { return resident + 2 * huge_rounded(streamed_max); }
};

Cost spine_cost(const TierInputs& in, const std::vector<bool>& resident) {
  Cost c;
  for (size_t l = 0; l < in.layer_bytes.size(); ++l) {
    if (resident[l]) {
      c.resident += in.layer_bytes[l];
    } else if (in.layer_bytes[l] > 0) {
      c.streamed_max = std::max(c.streamed_max, in.layer_bytes[l]);
      c.streamed_total += in.layer_bytes[l];
      ++c.n_streamed;
    }
  }
  return c;
}

}  // namespace

uint64_t huge_rounded(uint64_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

namespace {

// The plan with `extra` bytes taken from the budget first (the loaded drafters).
TierPlan plan_spine_and_experts(const TierInputs& in, uint64_t extra) {
  TierPlan p;
  const size_t n_layers = in.layer_bytes.size();
  const uint64_t spine_total =
      std::accumulate(in.layer_bytes.begin(), in.layer_bytes.end(), uint64_t{0});
  const uint64_t fixed =
      in.process_bytes + in.working_bytes + in.context_bytes + in.global_bytes + extra;
  const uint64_t lookahead = in.experts == ExpertMode::kMapped ? 0 : in.lookahead_bytes;
  if (in.forced_slots == 1 || in.forced_slots < 0)
    base::fail("expert slots: ", in.forced_slots, " is too few (at least 2)");

  const bool fits_whole = fixed + spine_total + in.expert_bytes <= in.budget_bytes;
  if (in.n_experts == 0 || in.experts == ExpertMode::kMapped ||
      (in.experts == ExpertMode::kAuto && in.spine == SpineMode::kAuto && fits_whole)) {
    p.experts_mapped = true;
  }
  if (p.experts_mapped && in.spine == SpineMode::kAuto) {
    p.resident.assign(n_layers, true);
    p.resident_spine_bytes = spine_total;
    p.planned_bytes = fixed + spine_total + in.expert_bytes;
    p.within_budget = p.planned_bytes <= in.budget_bytes;
    return p;
  }

  const int min_slots = p.experts_mapped ? 0 : std::max(2, in.min_slots);
  const int first_slots = in.forced_slots > 0 ? in.forced_slots : min_slots;
  const uint64_t min_pool = huge_rounded(static_cast<uint64_t>(first_slots) * in.slot_bytes);
  const uint64_t mapped_experts = p.experts_mapped ? in.expert_bytes : 0;

  // Largest layers first: each resident byte saves one read per token wherever it is, and
  // keeping a large layer can even lower the need (it shrinks the two stream buffers).
  std::vector<bool> resident(n_layers, false);
  const uint64_t base_bytes = fixed + lookahead + min_pool + mapped_experts;
  if (in.spine == SpineMode::kAuto) {
    std::vector<size_t> order(n_layers);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return in.layer_bytes[a] > in.layer_bytes[b]; });
    for (size_t l : order) {
      const uint64_t before = spine_cost(in, resident).total();
      resident[l] = true;
      const uint64_t after = spine_cost(in, resident).total();
      if (base_bytes + after > in.budget_bytes && after > before) resident[l] = false;
    }
  }
  const uint64_t need = base_bytes + spine_cost(in, resident).total();
  if (need > in.budget_bytes && !p.experts_mapped) {
    base::fail("memory budget ", base::format_bytes(in.budget_bytes),
               " is too small for this model: streaming still needs at least ",
               base::format_bytes(need), " (process ", base::format_bytes(in.process_bytes),
               ", working ", base::format_bytes(in.working_bytes), ", attention cache for ",
               in.max_context_tokens, " positions ", base::format_bytes(in.context_bytes),
               ", lm_head and norms ", base::format_bytes(in.global_bytes),
               ", spine layers and buffers ", base::format_bytes(spine_cost(in, resident).total()),
               ", ", first_slots, " expert slots ", base::format_bytes(min_pool),
               extra > 0 ? base::str_cat(", drafters ", base::format_bytes(extra)) : "", ")");
  }
  const Cost c = spine_cost(in, resident);
  p.resident = resident;
  p.resident_spine_bytes = c.resident;
  p.n_streamed = c.n_streamed;
  p.streamed_bytes_per_pass = c.streamed_total;
  p.stream_buffer_bytes = c.n_streamed > 0 ? 2 * huge_rounded(c.streamed_max) : 0;

  if (!p.experts_mapped) {
    int64_t slots = first_slots;
    if (in.forced_slots == 0 && in.slot_bytes > 0) {
      const uint64_t used = base_bytes - mapped_experts + c.total();
      const uint64_t left = in.budget_bytes > used ? in.budget_bytes - used : 0;
      slots += static_cast<int64_t>(left / in.slot_bytes);
      slots = std::min<int64_t>(slots, std::max<int64_t>(in.n_experts, min_slots));
      // Whole slots must still fit once the pool is rounded up to huge pages.
      while (slots > min_slots &&
             used - min_pool + huge_rounded(static_cast<uint64_t>(slots) * in.slot_bytes) >
                 in.budget_bytes)
        --slots;
    }
    p.n_slots = static_cast<int>(slots);
    p.slot_pool_bytes = huge_rounded(static_cast<uint64_t>(p.n_slots) * in.slot_bytes);
  }
  p.planned_bytes = base_bytes - min_pool + c.total() + p.slot_pool_bytes;
  p.within_budget = p.planned_bytes <= in.budget_bytes;
  return p;
}

}  // namespace

double disk_bytes_per_pass(const TierInputs& in, const TierPlan& p) {
  double bytes = static_cast<double>(p.streamed_bytes_per_pass);
  if (!p.experts_mapped && in.n_experts > 0) {
    const int route_slots = std::min(p.n_slots, std::max(2, in.min_slots));
    const double cached = std::min(
        1.0, static_cast<double>(p.n_slots - route_slots) / static_cast<double>(in.n_experts));
    bytes += static_cast<double>(in.experts_per_pass) * static_cast<double>(in.slot_bytes) *
             (1.0 - cached);
  }
  return bytes;
}

// Each drafter in turn: loaded when it is forced, or when the share of a pass's reads it saves
// is at least what taking its RAM from the spine and the expert cache adds to a pass's reads
// (a resident spine byte saves one read per pass; here both sides are bytes per pass). With
// everything mapped that holds as long as it still all fits.
TierPlan plan_tiers(const TierInputs& in) {
  TierPlan p = plan_spine_and_experts(in, 0);
  uint64_t taken = 0;
  std::vector<bool> loaded;
  std::vector<std::string> reasons;
  for (const DrafterCost& d : in.drafters) {
    std::optional<TierPlan> with;
    std::string why;
    try {
      with = plan_spine_and_experts(in, taken + d.bytes);
      if (!with->within_budget && p.within_budget) {
        why = "the model would no longer fit in the budget";
        with.reset();
      }
    } catch (const base::Error& e) {
      if (d.forced)
        base::fail("drafter ", d.name, " (", base::format_bytes(d.bytes),
                   ") does not fit in the memory budget: ", e.what());
      why = "does not fit in the budget";
    }
    bool load = false;
    if (with) {
      const double before = disk_bytes_per_pass(in, p), after = disk_bytes_per_pass(in, *with);
      const double saved = d.saved_fraction * after, cost = after - before;
      load = d.forced || saved >= cost;
      why = d.forced ? "asked for" : load ? "worth its memory" : "not worth its memory";
      if (after > 0) {
        why += base::str_cat(": expected to save ", std::round(100 * d.saved_fraction), "% of ",
                             base::format_bytes(static_cast<uint64_t>(after)),
                             " read per pass = ", base::format_bytes(static_cast<uint64_t>(saved)),
                             ", its memory costs ", base::format_bytes(static_cast<uint64_t>(cost)),
                             " more per pass");
      } else {
        why += ": everything still fits";
      }
    } else if (d.forced) {
      base::fail("drafter ", d.name, " (", base::format_bytes(d.bytes), "): ", why,
                 " (--memory-budget, or --draft ngram)");
    }
    reasons.push_back(why);
    loaded.push_back(load);
    if (load) {
      p = *with;
      taken += d.bytes;
    }
  }
  p.drafter_loaded = std::move(loaded);
  p.drafter_reasons = std::move(reasons);
  p.drafter_bytes = taken;
  return p;
}

std::string describe_drafters(const TierInputs& in, const TierPlan& p) {
  std::string s = "drafters:";
  for (size_t i = 0; i < in.drafters.size(); ++i) {
    s += base::str_cat(i ? "; " : " ", in.drafters[i].name, " (",
                       base::format_bytes(in.drafters[i].bytes), ") ",
                       p.drafter_loaded[i] ? "loaded, " : "not loaded, ", p.drafter_reasons[i]);
  }
  return s;
}

std::string describe_tiers(const TierInputs& in, const TierPlan& p,
                           const std::string& budget_source) {
  using base::format_bytes;
  const size_t n_layers = in.layer_bytes.size();
  std::string s = base::str_cat(
      "memory budget ", format_bytes(in.budget_bytes), " (", budget_source, "); planned ",
      format_bytes(p.planned_bytes), ": process ", format_bytes(in.process_bytes), ", working ",
      format_bytes(in.working_bytes), ", attention cache for ", in.max_context_tokens,
      " positions ", format_bytes(in.context_bytes), ", lm_head and norms ",
      format_bytes(in.global_bytes), p.experts_mapped ? "" : ", lookahead routers ",
      p.experts_mapped ? "" : format_bytes(in.lookahead_bytes), "; spine ", n_layers - p.n_streamed,
      " of ", n_layers, " layers resident (", format_bytes(p.resident_spine_bytes), ")");
  if (p.n_streamed > 0) {
    s += base::str_cat(", ", p.n_streamed, " streamed with O_DIRECT (",
                       format_bytes(p.streamed_bytes_per_pass), " per pass, buffers ",
                       format_bytes(p.stream_buffer_bytes), ")");
  }
  if (p.experts_mapped) {
    s += base::str_cat(
        "; experts mapped (", format_bytes(in.expert_bytes),
        p.within_budget ? ", the whole model fits" : ", page cache: NOT within the budget", ")");
  } else {
    const int route_slots = std::min(p.n_slots, std::max(2, in.min_slots));
    s += base::str_cat("; experts streamed with O_DIRECT: ", p.n_slots, " slots of ",
                       format_bytes(in.slot_bytes), " = ", format_bytes(p.slot_pool_bytes), " (",
                       route_slots, " for routes and prefetch, ", p.n_slots - route_slots,
                       " cache, ",
                       in.n_experts > 0 ? std::round(1000.0 * p.n_slots / in.n_experts) / 10 : 0.0,
                       "% of ", in.n_experts, " experts)");
  }
  return s;
}

}  // namespace deltafin::runtime
