// libFuzzer target for K3 chat rendering from request JSON and for the response parser: any JSON
// either renders or raises base::Error; rendered segments tokenize; the parser accepts any ids.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "chat/k3_render.h"
#include "chat/response_parser.h"
#include "tokenizer/tokenizer.h"

namespace {

using deltafin::tokenizer::Tokenizer;

Tokenizer make_tokenizer() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"message", " role", "=\"", "user", "think", "response"})
    tokens.emplace_back(t);
  return Tokenizer::from_parts(tokens, deltafin::tokenizer::Pattern::kKimi,
                               {{"[EOS]", 263},
                                {"<|end_of_msg|>", 264},
                                {"<|open|>", 265},
                                {"<|close|>", 266},
                                {"<|sep|>", 267},
                                {"<|media_begin|>", 268}},
                               8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer tok = make_tokenizer();
  const auto input = nlohmann::ordered_json::parse(data, data + size, nullptr, false);
  if (input.is_discarded()) return 0;
  try {
    const auto segments = deltafin::chat::render_k3(input);
    const auto ids = deltafin::chat::tokenize_segments(tok, segments);
    std::string joined;
    for (const auto& s : segments) {
      if (s.text.empty()) __builtin_trap();  // upstream never emits empty segments
      joined += s.text;
    }
    if (tok.decode_bytes(ids) != joined) __builtin_trap();
    // The rendered ids double as an arbitrary generated sequence for the parser.
    deltafin::chat::ResponseParser parser(tok, size % 2 == 0);
    for (const int32_t id : ids) parser.push(id);
    parser.finish();
  } catch (const deltafin::base::Error&) {
  }
  return 0;
}
