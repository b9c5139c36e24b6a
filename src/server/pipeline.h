// Generated ids to what a client sees: decoded text cut at stop strings (raw completions), or the
// K3 response channels (reasoning, answer, tool calls) with stop strings on the answer (chat).
// The CLI and the server use the same pipelines.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/outcome.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::server {

class TextPipeline {
 public:
  virtual ~TextPipeline() = default;
  // Consumes one generated id, appending what it reveals to `out`. Returns false when the
  // response is complete (a stop string matched, or a tool call ended a single-call response).
  virtual bool push(int32_t id, std::vector<Delta>& out) = 0;
  // The generation ended: appends what was held back.
  virtual void finish(std::vector<Delta>& out) = 0;

  bool stopped_by_string() const { return stopped_by_string_; }
  bool saw_tool_call() const { return saw_tool_call_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }

 protected:
  bool stopped_by_string_ = false;
  bool saw_tool_call_ = false;
  int64_t reasoning_tokens_ = 0;
};

// Raw continuation: every id's text (the end-of-sequence id `eos_id` shows nothing).
std::unique_ptr<TextPipeline> make_completion_pipeline(const tokenizer::Tokenizer& tokenizer,
                                                       int32_t eos_id,
                                                       std::vector<std::string> stops);

// A fresh tool-call id ("call_" and 24 random characters).
using ToolCallIdSource = std::function<std::string()>;

// A K3 chat response opened by the generation prompt (thinking or not). single_tool_call ends
// the response after the first complete tool call (parallel_tool_calls = false).
std::unique_ptr<TextPipeline> make_chat_pipeline(const tokenizer::Tokenizer& tokenizer,
                                                 bool thinking, std::vector<std::string> stops,
                                                 bool single_tool_call, ToolCallIdSource ids);

}  // namespace deltafin::server
