// `deltafin render-chat`: renders a K3 conversation (the renderer's arguments as one JSON object)
// into XTML segments, printed as one JSON array of [text, is_markup] pairs; with --vocab, the ids.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "chat/k3_render.h"
#include "command.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::apps {
namespace {

int run_render_chat(Args& args) {
  const std::string input_path = args.required("input");
  const std::string vocab = args.get("vocab");
  const std::string special_config = args.get("special-config");
  args.check_done();

  std::ifstream in(input_path, std::ios::binary);
  if (!in) base::fail("cannot open input file ", input_path);
  nlohmann::ordered_json input;  // ordered: tool arguments render in the caller's key order
  try {
    input = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    base::fail("file ", input_path, ": not valid JSON: ", e.what());
  }
  const auto segments = chat::render_k3(input);
  if (!vocab.empty()) {
    const auto tok = tokenizer::Tokenizer::load(vocab, tokenizer::Pattern::kKimi, special_config);
    const nlohmann::json ids = chat::tokenize_segments(tok, segments);
    std::printf("%s\n", ids.dump().c_str());
    return 0;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : segments) out.push_back({s.text, s.is_markup});
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

// Options: --input CASE.json [--vocab tiktoken.model [--special-config tokenizer_config.json]:
// print the K3 token ids instead of the segments]
DELTAFIN_COMMAND(render_chat, "render-chat",
                 "render a K3 chat (JSON arguments) into XTML segments, or ids with --vocab",
                 run_render_chat);

}  // namespace deltafin::apps
