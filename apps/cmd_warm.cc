// `deltafin warm --from-trace FILE`: ranks a streaming install's absent experts by their use in a
// recorded route trace and fetches the most used first; a plan by default, fetching only with
// --fetch (a warm-up can be many gigabytes).
#include <algorithm>
#include <cstdio>

#include "base/error.h"
#include "base/log.h"
#include "command.h"
#include "experts/placement.h"
#include "setup/expert_source.h"
#include "setup/fetch_plan.h"
#include "setup/files.h"
#include "setup/install.h"
#include "setup/progress.h"
#include "setup/repo.h"

namespace deltafin::apps {
namespace {

int run_warm(Args& args) {
  const std::string dir = args.get("model", setup::default_model_dir());
  const std::string trace = args.required("from-trace");
  const long long top = args.get_int("top", 0);
  const bool fetch = args.flag("fetch");
  const int jobs = static_cast<int>(args.get_int("jobs", 4));
  args.check_done();
  if (top < 0) base::fail("deltafin warm: --top must be 0 (every used expert) or more");
  if (jobs < 1 || jobs > 64) base::fail("deltafin warm: --jobs must be 1..64");
  if (!setup::is_streaming_install(dir)) {
    std::printf("%s is not a streaming install: every expert is local\n", dir.c_str());
    return 0;
  }
  const auto uses = experts::count_routes(trace);
  setup::ExpertSourceOptions options;
  options.n_connections = jobs;
  options.http.apply_env();
  auto source = setup::RemoteExpertSource::open(dir, options);
  const setup::ExpertFetchPlan all = setup::plan_expert_fetch(*source, setup::LayerRanges{});

  // Absent experts with recorded uses, most used first (ties in layer, expert order).
  struct Ranked {
    std::pair<int64_t, int64_t> key;
    uint64_t uses;
  };
  std::vector<Ranked> ranked;
  uint64_t absent_uses = 0;
  for (const auto& key : all.missing) {
    auto it = uses.find({static_cast<int>(key.first), static_cast<int>(key.second)});
    if (it == uses.end() || it->second == 0) continue;
    ranked.push_back({key, it->second});
    absent_uses += it->second;
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& a, const Ranked& b) { return a.uses > b.uses; });
  if (top > 0 && ranked.size() > static_cast<size_t>(top)) ranked.resize(static_cast<size_t>(top));
  setup::ExpertFetchPlan plan;
  uint64_t covered = 0;
  for (const Ranked& r : ranked) {
    const setup::ExpertFetchPlan::LayerCount& lc = all.layers.at(r.key.first);
    const uint64_t bytes = lc.n_missing > 0 ? lc.missing_bytes / lc.n_missing : 0;
    plan.missing.push_back(r.key);
    plan.missing_bytes += bytes;
    covered += r.uses;
  }
  plan.n_selected = static_cast<int64_t>(plan.missing.size());
  std::printf(
      "warm: %zu absent experts used in %s; fetching the top %zu (%s) covers %.1f%% of "
      "their recorded uses\n",
      static_cast<size_t>(std::count_if(
          all.missing.begin(), all.missing.end(),
          [&](const auto& k) {
            return uses.contains({static_cast<int>(k.first), static_cast<int>(k.second)});
          })),
      trace.c_str(), plan.missing.size(), setup::human_bytes(plan.missing_bytes).c_str(),
      absent_uses ? 100.0 * covered / absent_uses : 0.0);
  for (size_t i = 0; i < ranked.size() && i < 10; ++i)
    std::printf("  layer %lld expert %lld: %llu uses\n",
                static_cast<long long>(ranked[i].key.first),
                static_cast<long long>(ranked[i].key.second),
                static_cast<unsigned long long>(ranked[i].uses));
  if (!fetch) {
    std::printf("(a plan: add --fetch to fetch them)\n");
    return 0;
  }
  if (plan.missing.empty()) return 0;
  {
    setup::Progress progress("experts", plan.missing_bytes);
    setup::fetch_planned(*source, plan, 2 * jobs, &progress);
  }
  base::log_info("warm: fetched ", plan.missing.size(), " experts (",
                 setup::human_bytes(plan.missing_bytes), ")");
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(warm, "warm",
                 "rank a streaming install's absent experts by use in a route trace and fetch "
                 "the most used: --from-trace FILE [--model DIR] [--top N] [--fetch] [--jobs 4]",
                 run_warm);

}  // namespace deltafin::apps
