// Loading a model folder for the commands that run it: setup supplies the experts of a streaming
// install (the engine itself neither opens the network nor reads DELTAFIN_HTTP_*).
#pragma once

#include <memory>

#include "deltafin/engine.h"

namespace deltafin::apps {

// Engine::load(options), after filling options.expert_source from setup when the folder is a
// streaming install (its manifest's catalog, and a fetcher for the experts not local yet).
std::unique_ptr<Engine> load_engine(EngineOptions options);

}  // namespace deltafin::apps
