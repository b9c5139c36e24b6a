// K3's chat response as a TextStream: the chat module's response parser splits the ids into
// reasoning, answer and tool calls; stop strings apply to the answer only (a stop string in the
// reasoning would end the thinking a user asked for, which no client means).
#include "chat/response_parser.h"
#include "runtime/stop_matcher.h"
#include "runtime/text_streams.h"

namespace deltafin::runtime {
namespace {

class K3ResponseStream : public TextStream {
 public:
  K3ResponseStream(const tokenizer::Tokenizer& tokenizer, ChatResponseOptions options)
      : parser_(tokenizer, options.thinking),
        matcher_(std::move(options.stops)),
        single_tool_call_(options.single_tool_call),
        ids_(std::move(options.tool_call_id)),
        close_id_(tokenizer.special_id("<|close|>").value_or(-1)),
        in_reasoning_(options.thinking) {}

  bool push(int32_t id, std::vector<Delta>& out) override {
    // The reasoning is every id before the first closing bracket (that of `think`).
    if (id == close_id_) in_reasoning_ = false;
    if (in_reasoning_) ++reasoning_tokens_;
    return take(parser_.push(id), out);
  }

  void finish(std::vector<Delta>& out) override {
    take(parser_.finish(), out);
    flush_content(out);
  }

 private:
  // Returns false once the response is complete.
  bool take(const std::vector<chat::ParseEvent>& events, std::vector<Delta>& out) {
    for (const chat::ParseEvent& e : events) {
      if (done_) break;
      switch (e.kind) {
        case chat::ParseEvent::kReasoning:
          out.push_back(Delta{Delta::Kind::kReasoning, e.text, {}});
          break;
        case chat::ParseEvent::kContent:
          if (std::string text = matcher_.push(e.text); !text.empty())
            out.push_back(Delta{Delta::Kind::kContent, std::move(text), {}});
          if (matcher_.stopped()) stopped_by_string_ = done_ = true;
          break;
        case chat::ParseEvent::kToolCall:
          flush_content(out);
          saw_tool_call_ = true;
          out.push_back(Delta{Delta::Kind::kToolCall, "",
                              ToolCall{ids_(), e.call.name, e.call.arguments_json}});
          if (single_tool_call_) done_ = true;
          break;
        case chat::ParseEvent::kEnd:
          flush_content(out);
          done_ = true;
          break;
      }
    }
    return !done_;
  }

  // The answer's held-back text once no more answer can follow.
  void flush_content(std::vector<Delta>& out) {
    if (matcher_.stopped()) return;
    if (std::string text = matcher_.flush(); !text.empty())
      out.push_back(Delta{Delta::Kind::kContent, std::move(text), {}});
  }

  chat::ResponseParser parser_;
  StopMatcher matcher_;
  bool single_tool_call_;
  std::function<std::string()> ids_;
  int32_t close_id_;
  bool in_reasoning_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<TextStream> make_k3_response_stream(const tokenizer::Tokenizer& tokenizer,
                                                    ChatResponseOptions options) {
  return std::make_unique<K3ResponseStream>(tokenizer, std::move(options));
}

}  // namespace deltafin::runtime
