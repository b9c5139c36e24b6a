// Incremental parsing of what K3 generates after the generation prompt: reasoning (the `think`
// element), content (`response`), tool calls (`tools` > `call` > `argument` | `json`) and the end
// of the message, one id at a time so that a server can stream each part as it is produced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deltafin::chat {

struct ToolCall {
  std::string name;
  // A JSON object text: typed arguments re-assembled ({"key": value, ...}, string arguments as
  // JSON strings, other types as the model wrote them when that is valid JSON, else as strings),
  // or the raw text of a `json` block as the model wrote it.
  std::string arguments_json;
  // "call_" + the call's index attribute (1-based, in order); unique within one response only,
  // so a server that needs globally unique ids should assign its own.
  std::string id;
};

struct ParseEvent {
  enum Kind { kReasoning, kContent, kToolCall, kEnd } kind;
  std::string text;  // kReasoning / kContent: the next piece (whole UTF-8 characters)
  ToolCall call;     // kToolCall
};

class ResponseParser {
 public:
  // thinking: whether the generation prompt opened `think` (else `response`). The tokenizer must
  // know <|open|>, <|close|>, <|sep|> and <|end_of_msg|> (base::Error otherwise).
  ResponseParser(const tokenizer::Tokenizer& tokenizer, bool thinking);

  // Feeds one generated id. Text is emitted as soon as it forms whole characters; a tool call
  // when its element closes; kEnd at <|end_of_msg|> or [EOS], after which ids are ignored.
  std::vector<ParseEvent> push(int32_t id);
  // End of generation without <|end_of_msg|> (e.g. a token limit): emits held-back text; an
  // unfinished tool call is dropped.
  std::vector<ParseEvent> finish();
  bool done() const { return done_; }

 private:
  enum class Mode { kBody, kOpenHeader, kCloseHeader };
  struct Argument {
    std::string key;
    std::string type;
    std::string value_bytes;
  };

  void flush_text(std::vector<ParseEvent>& events);
  void on_open(const std::string& header);
  void on_close(const std::string& tag, std::vector<ParseEvent>& events);
  // The innermost element whose text is reasoning, content or an argument value.
  std::string text_channel() const;

  const tokenizer::Tokenizer* tokenizer_;
  int32_t open_id_, close_id_, sep_id_, end_id_, eos_id_;
  Mode mode_ = Mode::kBody;
  bool done_ = false;
  std::vector<std::string> stack_;  // open elements, outermost first
  std::string header_bytes_;
  tokenizer::StreamingDecoder decoder_;
  ToolCall call_;
  bool in_call_ = false;
  bool call_has_raw_ = false;
  std::vector<Argument> arguments_;
  std::string raw_bytes_;  // the current `json` block or argument value
  int n_calls_ = 0;
};

}  // namespace deltafin::chat
