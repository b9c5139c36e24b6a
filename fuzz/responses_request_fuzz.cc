// libFuzzer target for /v1/responses bodies: validation, the translation into a chat request
// (checked again by the chat parser) and its K3 rendering, and the Response writer over the
// translated request's echo. Anything the input can cause must be an ApiError or (from the
// renderer, reported as a 400) a base::Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "chat/k3_render.h"
#include "server/api_error.h"
#include "server/responses.h"

using namespace deltafin;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  server::RequestLimits limits;
  limits.max_tokens_limit = 512;
  limits.vocab_size = 1024;
  limits.model_names = {"demo"};
  try {
    server::ResponsesRequest r = server::parse_responses_request(body, limits);
    const server::GenerationParams& g = r.chat.gen;
    if (g.max_tokens < 1 || g.max_tokens > limits.max_tokens_limit) __builtin_trap();
    if (!(g.temperature >= 0 && g.temperature <= 2) || !(g.top_p >= 0 && g.top_p <= 1))
      __builtin_trap();
    if (!r.chat.render_input["messages"].is_array() || r.chat.render_input["messages"].empty())
      __builtin_trap();
    int n = 0;
    server::ResponsesWriter writer(
        std::move(r.echo), [&n](const char* prefix) { return prefix + std::to_string(n++); });
    server::Outcome outcome;
    outcome.finish_reason = "stop";
    const server::ResponseMeta meta{"resp_x", 0, "demo"};
    if (writer.begin(meta).empty() || writer.end(meta, outcome).empty()) __builtin_trap();
    chat::render_k3(r.chat.render_input);
  } catch (const server::ApiError&) {
  } catch (const base::Error&) {
  }
  return 0;
}
