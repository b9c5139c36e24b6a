// Which tokenizer and chat format each family's folder holds, and the Text over them.
#include "runtime/text.h"

#include <filesystem>
#include <memory>

#include "base/error.h"
#include "chat/k3_render.h"
#include "runtime/text_streams.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::runtime {
namespace {

// Kimi K3's XTML (chat/k3_render.h), tokenized segment by segment as the model was trained.
class K3ChatFormat : public ChatFormat {
 public:
  explicit K3ChatFormat(const tokenizer::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::vector<int32_t> render(const nlohmann::ordered_json& input) const override {
    return chat::tokenize_segments(tokenizer_, chat::render_k3(input));
  }
  std::unique_ptr<TextStream> response(ChatResponseOptions options) const override {
    return make_k3_response_stream(tokenizer_, std::move(options));
  }

 private:
  const tokenizer::Tokenizer& tokenizer_;
};

// A family's text: the pre-tokenizer its tiktoken.model was trained with, and its chat format
// (null: none here; Kimi-Linear's own template is not K3's XTML).
struct TextFamily {
  tokenizer::Pattern pattern;
  std::unique_ptr<ChatFormat> (*chat)(const tokenizer::Tokenizer& tokenizer);
};

std::unique_ptr<ChatFormat> k3_chat(const tokenizer::Tokenizer& tokenizer) {
  return std::make_unique<K3ChatFormat>(tokenizer);
}

TextFamily text_family(format::Arch arch) {
  switch (arch) {
    case format::Arch::kKimiK3:
      return {tokenizer::Pattern::kKimi, k3_chat};
    case format::Arch::kKimiLinear:
      return {tokenizer::Pattern::kKimi, nullptr};
    case format::Arch::kQwen3:
      return {tokenizer::Pattern::kKimi, nullptr};  // tokenizer.json brings its own pre-tokenizer
  }
  base::fail("no text family for architecture ", format::arch_name(arch));
}

class TextImpl : public Text {
 public:
  TextImpl(std::shared_ptr<const tokenizer::Tokenizer> tokenizer, int32_t eos_id,
           const TextFamily& family)
      : tokenizer_(std::move(tokenizer)),
        eos_id_(eos_id),
        chat_(family.chat ? family.chat(*tokenizer_) : nullptr) {}

  std::vector<int32_t> encode(std::string_view text) const override {
    return tokenizer_->encode_ordinary(text);
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    return tokenizer_->decode(ids);
  }
  int32_t eos_id() const override { return eos_id_; }
  std::unique_ptr<TextStream> completion(std::vector<std::string> stops) const override {
    return make_completion_stream(*tokenizer_, eos_id_, std::move(stops));
  }
  const ChatFormat* chat() const override { return chat_.get(); }

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;  // shared with the Qwen3 drafter
  int32_t eos_id_;
  std::unique_ptr<ChatFormat> chat_;  // refers to tokenizer_
};

}  // namespace

tokenizer::Tokenizer load_tokenizer(const std::string& model_dir,
                                    const format::ModelConfig& config) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const bool hf = config.arch == format::Arch::kQwen3;
  const fs::path file = dir / (hf ? "tokenizer.json" : "tiktoken.model");
  if (!fs::is_regular_file(file))
    base::fail("model folder ", model_dir, " has no ", file.filename().string(),
               " (the tokenizer)");
  tokenizer::Tokenizer tokenizer = [&] {
    if (hf) return tokenizer::load_hf_tokenizer(file.string());
    const fs::path special = dir / "tokenizer_config.json";
    return tokenizer::Tokenizer::load(file.string(), text_family(config.arch).pattern,
                                      fs::is_regular_file(special) ? special.string() : "");
  }();
  if (tokenizer.vocab_size() > config.vocab_size)
    base::fail("model folder ", model_dir, ": the tokenizer has ", tokenizer.vocab_size(),
               " ids but config.json's vocab_size is ", config.vocab_size);
  return tokenizer;
}

std::unique_ptr<Text> load_text(const std::string& model_dir, const format::ModelConfig& config,
                                std::shared_ptr<const tokenizer::Tokenizer> tokenizer) {
  if (!tokenizer)
    tokenizer = std::make_shared<const tokenizer::Tokenizer>(load_tokenizer(model_dir, config));
  int32_t eos_id = -1;
  if (config.eos_token_id >= 0) {
    eos_id = static_cast<int32_t>(config.eos_token_id);
  } else if (auto id = tokenizer->special_id("<|end_of_msg|>")) {
    eos_id = *id;
  } else {
    base::fail("model folder ", model_dir,
               ": config.json names no eos_token_id and the tokenizer has no <|end_of_msg|>");
  }
  return std::make_unique<TextImpl>(std::move(tokenizer), eos_id, text_family(config.arch));
}

}  // namespace deltafin::runtime
