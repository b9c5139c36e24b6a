// A model folder's text side behind the public Text: the tokenizer files beside the weights,
// checked against the config, and the chat format the config's family uses.
#pragma once

#include <memory>
#include <string>

#include "deltafin/text.h"
#include "format/config.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::runtime {

// Throws base::Error naming the folder when it has no tiktoken.model, when the tokenizer has more
// ids than the model, or when neither the config nor the tokenizer names an end-of-message id.
// `tokenizer`: the folder's tokenizer when the caller loaded it already (load_tokenizer); null
// loads it.
std::unique_ptr<Text> load_text(const std::string& model_dir, const format::ModelConfig& config,
                                std::shared_ptr<const tokenizer::Tokenizer> tokenizer = nullptr);

// The folder's tokenizer alone: tiktoken.model (+ tokenizer_config.json's specials) for the Kimi
// families, tokenizer.json for Qwen3. Throws base::Error naming the folder when it has none or one
// with more ids than the model.
tokenizer::Tokenizer load_tokenizer(const std::string& model_dir,
                                    const format::ModelConfig& config);

}  // namespace deltafin::runtime
