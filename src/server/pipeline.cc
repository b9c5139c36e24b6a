// The raw-completion pipeline: streaming UTF-8-safe decoding, then stop strings.
#include "server/pipeline.h"

#include "server/stop_matcher.h"

namespace deltafin::server {
namespace {

class CompletionPipeline : public TextPipeline {
 public:
  CompletionPipeline(const tokenizer::Tokenizer& tokenizer, int32_t eos_id,
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

std::unique_ptr<TextPipeline> make_completion_pipeline(const tokenizer::Tokenizer& tokenizer,
                                                       int32_t eos_id,
                                                       std::vector<std::string> stops) {
  return std::make_unique<CompletionPipeline>(tokenizer, eos_id, std::move(stops));
}

}  // namespace deltafin::server
