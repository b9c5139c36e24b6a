// The one model session a server or CLI generates with, and conversation-state reuse: after a
// response the session is kept at its end, and a next prompt whose ids extend the ids it holds
// runs only the new ids. Anything else starts the session over. The output is the same either
// way; only the work differs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "deltafin/engine.h"

namespace deltafin::server {

struct GenerationRun {
  GenerateResult result;
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;    // prompt ids the kept state already held
  double first_token_ms = 0.0;  // from the call to the first generated id (the prompt's cost)
  double total_ms = 0.0;
};

class Generator {
 public:
  // reuse = false starts every request from an empty session (for comparison and --no-reuse).
  Generator(Engine& engine, bool reuse);

  // Runs `prompt` (after the kept state when it extends it) and generates per `options`
  // (options.cancel stops a long prompt between chunks: StopReason::kCancelled). Throws what the
  // session throws; the kept state is dropped then.
  GenerationRun generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                         const TokenCallback& on_token);

  // The ids the session holds (prompt and generated ids of the last request).
  const std::vector<int32_t>& ids() const { return ids_; }
  const SessionStats& stats() const { return session_->stats(); }

 private:
  std::unique_ptr<Session> session_;
  std::vector<int32_t> ids_;
  bool reuse_;
};

}  // namespace deltafin::server
