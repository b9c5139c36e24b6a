// The streaming install's expert source, opened through setup, handed to the engine.
#include "load_engine.h"

#include <optional>

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

}  // namespace deltafin::apps
