// Prefix check against the kept ids, the session call, and the timing of the first id.
#include "server/generator.h"

#include <algorithm>
#include <chrono>
#include <span>

namespace deltafin::server {

Generator::Generator(Engine& engine, bool reuse) : session_(engine.new_session()), reuse_(reuse) {}

GenerationRun Generator::generate(const std::vector<int32_t>& prompt,
                                  const GenerateOptions& options, const TokenCallback& on_token) {
  GenerationRun run;
  run.prompt_tokens = static_cast<int64_t>(prompt.size());
  // The kept state serves when its ids are a prefix of the prompt. An equal prompt works too: the
  // session still holds the logits (or the pending id) at its end.
  const bool extends = reuse_ && !ids_.empty() && ids_.size() <= prompt.size() &&
                       std::equal(ids_.begin(), ids_.end(), prompt.begin());
  if (extends) {
    run.reused_tokens = static_cast<int64_t>(ids_.size());
  } else {
    session_->reset();
    ids_.clear();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto ms_since = [&t0] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  bool first = true;
  const TokenCallback timed = [&](int32_t id) {
    if (first) run.first_token_ms = ms_since();
    first = false;
    return on_token ? on_token(id) : true;
  };
  const std::span<const int32_t> rest = std::span(prompt).subspan(run.reused_tokens);
  try {
    run.result = session_->generate(rest, options, timed);
  } catch (...) {
    session_->reset();
    ids_.clear();
    throw;
  }
  if (first) run.first_token_ms = ms_since();  // nothing generated: the prompt's cost alone
  run.total_ms = ms_since();
  // What the session holds: all of it, or the prompt's first part when cancelled in the prompt.
  ids_ = prompt;
  ids_.insert(ids_.end(), run.result.ids.begin(), run.result.ids.end());
  ids_.resize(static_cast<size_t>(session_->position()));
  return run;
}

}  // namespace deltafin::server
