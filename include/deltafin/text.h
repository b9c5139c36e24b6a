// Text through the public API: the model folder's tokenizer and its family's chat format, and the
// streams that turn generated ids into what a user sees (text cut at stop strings, or a chat
// response's reasoning, answer and tool calls). The CLI and the server share them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin {

struct ToolCall {
  std::string id;         // from ChatResponseOptions::tool_call_id (fresh per call)
  std::string name;       // function name
  std::string arguments;  // JSON object text
};

// One piece of a response, in the order a user sees it.
struct Delta {
  enum class Kind { kReasoning, kContent, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;  // reasoning or content text (whole UTF-8 characters)
  ToolCall call;     // kToolCall
};

// Generated ids to deltas, one id at a time.
class TextStream {
 public:
  virtual ~TextStream() = default;
  // Consumes one generated id, appending what it reveals to `out`. Returns false when the
  // response is complete (a stop string matched, the message ended, or a tool call ended a
  // single-call response).
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

struct ChatResponseOptions {
  bool thinking = true;            // the generation prompt opened the reasoning
  std::vector<std::string> stops;  // stop strings, matched on the answer only
  bool single_tool_call = false;   // the response ends after its first complete tool call
  std::function<std::string()> tool_call_id;  // a fresh id for each tool call
};

// A family's chat format: a conversation to prompt ids, and generated ids back to the response's
// channels.
class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  // The renderer's arguments as one object: messages (required), tools, thinking,
  // thinking_effort, add_generation_prompt, tool_choice, response_format (docs/SERVER.md). An
  // ordered_json keeps the caller's key order in tool arguments. Throws std::runtime_error
  // (deltafin's Error) for a conversation the format rejects, saying why.
  virtual std::vector<int32_t> render(const nlohmann::ordered_json& input) const = 0;
  // What the model generates after a rendered conversation's generation prompt.
  virtual std::unique_ptr<TextStream> response(ChatResponseOptions options) const = 0;
};

// A model folder's text side: its tokenizer (tiktoken.model, tokenizer_config.json) and the chat
// format its family uses.
class Text {
 public:
  virtual ~Text() = default;
  // Untrusted text: special-token strings in it are encoded as ordinary text.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Token bytes (special tokens as their names) decoded with U+FFFD for invalid UTF-8.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The end-of-message id generation stops at: config.json's eos_token_id, else the
  // tokenizer's <|end_of_msg|>.
  virtual int32_t eos_id() const = 0;
  // Raw continuation: every id's text (the eos id shows nothing), cut before the first of
  // `stops`.
  virtual std::unique_ptr<TextStream> completion(std::vector<std::string> stops) const = 0;
  // Null when the family has no chat format here (chat requests are refused then).
  virtual const ChatFormat* chat() const = 0;
};

}  // namespace deltafin
