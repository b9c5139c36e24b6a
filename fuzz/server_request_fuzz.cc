// libFuzzer target for what the server takes from a client before any model work: the HTTP head,
// body framing and chunked bodies, and the chat / completion request bodies with their K3
// rendering. Anything the input can cause must be an HttpError, an ApiError or (from the
// renderer, reported as a 400) a base::Error; the first byte picks the parser.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "chat/k3_render.h"
#include "server/api_error.h"
#include "server/http.h"
#include "server/request.h"

using namespace deltafin;

namespace {

void check_generation(const server::GenerationParams& g, const server::RequestLimits& limits) {
  if (g.max_tokens < 0 || g.max_tokens > limits.max_tokens_limit) __builtin_trap();
  if (g.stop.size() > 4 || !(g.temperature >= 0 && g.temperature <= 2)) __builtin_trap();
  if (!(g.top_p >= 0 && g.top_p <= 1) || g.top_k < 0) __builtin_trap();
  for (const std::string& s : g.stop)
    if (s.empty()) __builtin_trap();
}

void fuzz_http(std::string_view data) {
  server::HttpRequest req;
  size_t head_bytes = 0;
  if (server::parse_request_head(data, req, head_bytes) != server::HeadParse::kDone) return;
  if (head_bytes > data.size() || req.path.empty() || req.path[0] != '/') __builtin_trap();
  const server::BodyFraming f = server::body_framing(req, 1 << 16);
  if (f.content_length > (1 << 16)) __builtin_trap();
  if (f.chunked) {
    server::ChunkedDecoder decoder(1 << 16);
    std::string body;
    const size_t used = decoder.feed(data.substr(head_bytes), body);
    if (used > data.size() - head_bytes || body.size() > (1 << 16)) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  server::RequestLimits limits;
  limits.max_tokens_limit = 512;
  limits.vocab_size = 1024;
  limits.model_names = {"demo"};
  try {
    switch (data[0] % 3) {
      case 0:
        fuzz_http(rest);
        break;
      case 1: {
        const server::ChatRequest r = server::parse_chat_request(rest, limits);
        check_generation(r.gen, limits);
        if (r.gen.max_tokens < 1) __builtin_trap();
        chat::render_k3(r.render_input);
        break;
      }
      case 2: {
        const server::CompletionRequest r = server::parse_completion_request(rest, limits);
        check_generation(r.gen, limits);
        if (!r.prompt_text && r.prompt_ids.empty()) __builtin_trap();
        for (int32_t id : r.prompt_ids)
          if (id < 0 || id >= limits.vocab_size) __builtin_trap();
        break;
      }
    }
  } catch (const server::HttpError&) {
  } catch (const server::ApiError&) {
  } catch (const base::Error&) {
  }
  return 0;
}
