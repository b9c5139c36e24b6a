// The TextStreams behind the public Text and ChatFormat: raw continuation (UTF-8-safe decoding,
// then stop strings) and K3's chat response (reasoning, answer and tool calls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deltafin/text.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::runtime {

// Every id's text; the end-of-sequence id `eos_id` shows nothing.
std::unique_ptr<TextStream> make_completion_stream(const tokenizer::Tokenizer& tokenizer,
                                                   int32_t eos_id, std::vector<std::string> stops);

// A K3 chat response after the generation prompt (thinking or not); stop strings apply to the
// answer only. The tokenizer must know K3's chat special tokens (base::Error otherwise).
std::unique_ptr<TextStream> make_k3_response_stream(const tokenizer::Tokenizer& tokenizer,
                                                    ChatResponseOptions options);

}  // namespace deltafin::runtime
