// A model folder opened for chat: the engine, the tokenizer beside it (tiktoken.model and
// tokenizer_config.json), and the ids and names the CLI and the server need.
#pragma once

#include <memory>
#include <string>

#include "deltafin/engine.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::server {

struct LoadedModel {
  std::string dir;
  std::string id;  // the name clients use: the folder's last two components for owner/name
                   // installs, else its last component
  std::unique_ptr<Engine> engine;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  int32_t eos_id = -1;  // the end-of-message id generation stops at
};

// Opens the tokenizer of options.model_dir beside `engine` (loaded from it); throws base::Error
// naming the missing file or the mismatch (e.g. a tokenizer whose vocabulary is larger than the
// model's).
LoadedModel load_model(const EngineOptions& options, std::unique_ptr<Engine> engine);

// Logs what was chosen, after the engine's own memory-plan line: the model and its shape, what
// the loaded model holds resident and how experts and spine are reached, the kernel variant and
// the thread count.
void log_model_plan(const LoadedModel& model);

}  // namespace deltafin::server
