// The streaming install's expert source, opened through setup, handed to the engine; the plan log.
#include "load_engine.h"

#include <optional>

#include "base/cpu_features.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "base/thread_pool.h"
#include "format/config.h"
#include "setup/streaming_experts.h"

namespace deltafin::apps {

std::unique_ptr<Engine> load_engine(EngineOptions options) {
  setup::ExpertSourceOptions fetch;
  fetch.http.apply_env();  // DELTAFIN_HTTP_* retry settings, as for setup and fetch-experts
  std::optional<setup::StreamingExperts> remote = setup::open_streaming_experts(
      options.model_dir, format::load_config(options.model_dir), fetch);
  if (remote) {
    options.expert_source.catalog =
        std::make_shared<const experts::ExpertCatalog>(std::move(remote->catalog));
    options.expert_source.fetcher = std::move(remote->fetcher);
  }
  return Engine::load(options);
}

void log_model_plan(const Engine& engine, const std::string& id, const std::string& model_dir) {
  const ModelInfo& info = engine.info();
  base::log_info("model: ", id, lossy_suffix(info), " (", info.arch, ", ", info.n_layers,
                 " layers, hidden ", info.hidden_size, ", vocab ", info.vocab_size, ", spine ",
                 info.spine_dtype, info.lossy ? ", LOSSY" : "", ") from ", model_dir);
  // The engine logged its memory plan (budget, resident spine, expert slots) while loading.
  const MemoryPlanInfo plan = engine.memory_plan();
  base::log_info("memory: ", base::format_bytes(base::current_rss_bytes()),
                 " resident after load; experts ",
                 plan.streaming ? "read from disk as tokens route to them" : "mapped", ", ",
                 plan.streamed_layers, " spine layers streamed per pass");
  base::log_info("kernels: ", base::isa_name(base::selected_isa()), " on ",
                 base::default_pool().size(), " threads (", base::cpu_summary(), ")");
}

}  // namespace deltafin::apps
