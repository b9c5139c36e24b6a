// Loading a model folder for the commands that run it: setup supplies the experts of a streaming
// install (the engine itself neither opens the network nor reads DELTAFIN_HTTP_*); and the log of
// what was loaded.
#pragma once

#include <memory>
#include <string>

#include "deltafin/engine.h"

namespace deltafin::apps {

// Engine::load(options), after filling options.expert_source from setup when the folder is a
// streaming install (its manifest's catalog, and a fetcher for the experts not local yet).
std::unique_ptr<Engine> load_engine(EngineOptions options);

// Logs what was chosen, after the engine's own memory-plan line: the model (as `id`) and its
// shape, what the loaded model holds resident and how experts and spine are reached, the kernel
// variant and the thread count.
void log_model_plan(const Engine& engine, const std::string& id, const std::string& model_dir);

}  // namespace deltafin::apps
