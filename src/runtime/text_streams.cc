// The raw-completion stream: streaming UTF-8-safe decoding, then stop strings.
#include "runtime/text_streams.h"
#include "runtime/stop_matcher.h"

namespace deltafin::runtime {
namespace {

class CompletionStream : public TextStream {
 public:
  CompletionStream(const tokenizer::Tokenizer& tokenizer, int32_t eos_id,
                   std::vector<std::string> stops)
      : decoder_(tokenizer), eos_id_(eos_id), matcher_(std::move(stops)) {}

  bool push(int32_t id, std::vector<Delta>& out) override {
    if (id == eos_id_) return true;
    emit(matcher_.push(decoder_.push(id)), out);
    return !matcher_.stopped();
  }

  void finish(std::vector<Delta>& out) override {
    if (matcher_.stopped()) return;
    emit(matcher_.push(decoder_.flush()), out);
    if (!matcher_.stopped()) emit(matcher_.flush(), out);
  }

 private:
  void emit(std::string text, std::vector<Delta>& out) {
    stopped_by_string_ = matcher_.stopped();
    if (!text.empty()) out.push_back(Delta{Delta::Kind::kContent, std::move(text), {}});
  }

  tokenizer::StreamingDecoder decoder_;
  int32_t eos_id_;
  StopMatcher matcher_;
};

}  // namespace

std::unique_ptr<TextStream> make_completion_stream(const tokenizer::Tokenizer& tokenizer,
                                                   int32_t eos_id, std::vector<std::string> stops) {
  return std::make_unique<CompletionStream>(tokenizer, eos_id, std::move(stops));
}

}  // namespace deltafin::runtime
