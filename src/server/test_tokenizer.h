// A byte-level tokenizer with K3's chat special tokens, for tests that need the chat format on a
// tiny model: 256 byte tokens + 256 reserved ids = tests/fixtures/k3-tiny-a's vocabulary, with
// <|end_of_msg|> at 501, that model's eos.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deltafin::server::testing {

inline tokenizer::Tokenizer k3_byte_tokenizer() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  return tokenizer::Tokenizer::from_parts(bytes, tokenizer::Pattern::kKimi,
                                          {{"[BOS]", 256},
                                           {"[EOS]", 257},
                                           {"<|end_of_msg|>", 501},
                                           {"<|open|>", 259},
                                           {"<|close|>", 260},
                                           {"<|sep|>", 261}},
                                          256);
}

}  // namespace deltafin::server::testing
