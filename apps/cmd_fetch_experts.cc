// `deltafin fetch-experts`: complete the local expert pool of a streaming install.
#include <cstdio>

#include "base/error.h"
#include "base/log.h"
#include "command.h"
#include "setup/expert_source.h"
#include "setup/fetch_plan.h"
#include "setup/files.h"
#include "setup/install.h"
#include "setup/progress.h"
#include "setup/repo.h"
#include "setup/verify.h"

namespace deltafin::apps {
namespace {

int run_fetch_experts(Args& args) {
  const std::string dir = args.get("model", setup::default_model_dir());
  const setup::LayerRanges layers = setup::LayerRanges::parse(args.get("layers", ""));
  const bool dry_run = args.flag("dry-run");
  const bool verify = args.flag("verify");
  const int jobs = static_cast<int>(args.get_int("jobs", 4));
  if (jobs < 1 || jobs > 64) base::fail("deltafin fetch-experts: --jobs must be 1..64");
  args.check_done();

  if (!setup::is_streaming_install(dir)) {
    std::printf("%s is not a streaming install: every expert is local\n", dir.c_str());
    return 0;
  }
  if (verify) {
    if (dry_run) base::fail("deltafin fetch-experts: --verify and --dry-run exclude each other");
    int n_bad = 0;
    for (const setup::ShardCheck& c : setup::verify_streaming_install(dir)) {
      using R = setup::ShardCheck::Result;
      if (c.result == R::kOk) std::printf("%s: ok (sha256 matches)\n", c.shard.c_str());
      if (c.result == R::kNoHash)
        std::printf("%s: no published sha256 to check\n", c.shard.c_str());
      if (c.result == R::kIncomplete)
        std::printf("%s: not checked, %lld experts not local yet\n", c.shard.c_str(),
                    static_cast<long long>(c.n_missing));
      if (c.result == R::kMismatch) {
        std::printf("%s: MISMATCH: %s\n", c.shard.c_str(), c.detail.c_str());
        ++n_bad;
      }
    }
    if (n_bad) {
      base::fail(
          "fetch-experts --verify: ", n_bad,
          " shard(s) differ from the repository; remove their "
          "experts/L* folders and spine files and rerun deltafin setup --stream and fetch-experts");
    }
    return 0;
  }
  setup::ExpertSourceOptions options;
  options.n_connections = jobs;
  options.http.apply_env();
  auto source = setup::RemoteExpertSource::open(dir, options);
  const setup::ExpertFetchPlan plan = setup::plan_expert_fetch(*source, layers);
  if (plan.layers.empty())
    base::fail("deltafin fetch-experts: no layer with routed experts matches --layers");

  if (dry_run) {
    for (const auto& [layer, c] : plan.layers) {
      std::printf("layer %3lld: %lld of %lld experts to fetch, %s\n", static_cast<long long>(layer),
                  static_cast<long long>(c.n_missing), static_cast<long long>(c.n_experts),
                  setup::human_bytes(c.missing_bytes).c_str());
    }
    std::printf("total: %zu of %lld experts to fetch, %s (%llu bytes)\n", plan.missing.size(),
                static_cast<long long>(plan.n_selected),
                setup::human_bytes(plan.missing_bytes).c_str(),
                static_cast<unsigned long long>(plan.missing_bytes));
    return 0;
  }
  if (plan.missing.empty()) {
    base::log_info("fetch-experts: all ", plan.n_selected,
                   " experts of the selected layers are local");
    return 0;
  }
  base::log_info("fetch-experts: fetching ", plan.missing.size(), " experts (",
                 setup::human_bytes(plan.missing_bytes), ") over ", jobs, " connections");
  {
    setup::Progress progress("experts", plan.missing_bytes);
    setup::fetch_planned(*source, plan, 2 * jobs, &progress);
  }
  const auto stats = source->stats();
  const setup::ExpertPoolStatus pool = setup::expert_pool_status(dir);
  base::log_info("fetch-experts: fetched ", stats.experts_fetched, " experts in ", stats.requests,
                 " requests (", stats.retries, " retries); the pool has ", pool.n_local, " of ",
                 pool.n_experts, " experts, ", setup::human_bytes(pool.bytes_missing),
                 " still remote");
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(
    fetch_experts_cmd, "fetch-experts",
    "fetch the experts a streaming install does not have yet (--layers 1-40, --dry-run)",
    run_fetch_experts);

}  // namespace deltafin::apps
