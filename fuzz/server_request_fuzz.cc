// libFuzzer target for what the server takes from a client before any model work: the HTTP head,
// body framing and chunked bodies, and the chat / completion request bodies with their K3
// rendering, and whole connections (a socket pair fed the input: reading with the limits, the
// body budget and the browser checks). Anything the input can cause must be an HttpError, an
// ApiError or (from the renderer, reported as a 400) a base::Error, every refusal an
// OpenAI-shaped error, and every body byte handed back; the first byte picks the mode.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "chat/k3_render.h"
#include "server/api_error.h"
#include "server/browser_guard.h"
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

// Refusals must be statuses the server documents, with a message, in the OpenAI shape.
void check_refusal(int status, const std::string& message) {
  static constexpr int kStatuses[] = {400, 403, 408, 413, 415, 417, 421, 431, 501, 503, 505};
  if (std::find(std::begin(kStatuses), std::end(kStatuses), status) == std::end(kStatuses) ||
      message.empty())
    __builtin_trap();
  const auto j = nlohmann::json::parse(server::error_json(server::ApiError{status, message}));
  if (!j["error"].is_object() || j["error"].size() != 4 || !j["error"]["message"].is_string())
    __builtin_trap();
}

// The input as what a client sent on one connection, then its sending side shut: every request
// read is put through the browser checks and answered, until the input ends or is refused.
void fuzz_connection(std::string_view data) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return;
  const std::string_view sent = data.substr(0, 32 * 1024);  // within the socket's buffer
  if (::write(fds[1], sent.data(), sent.size()) != static_cast<ssize_t>(sent.size())) {
    ::close(fds[0]);
    ::close(fds[1]);
    return;
  }
  ::shutdown(fds[1], SHUT_WR);
  server::HttpLimits limits;
  limits.max_head_bytes = 4096;
  limits.max_body_bytes = 8192;
  limits.read_timeout_ms = 20;
  limits.idle_timeout_ms = 20;
  limits.write_timeout_ms = 20;
  server::StopFlags stop;
  server::BodyBudget bodies(12 * 1024);
  server::BrowserPolicy policy;
  policy.allowed_origins = {"http://localhost:3000"};
  {
    server::HttpConnection conn(fds[0], limits, stop, &bodies);
    for (int n = 0; n < 64; ++n) {
      std::optional<server::HttpRequest> req;
      try {
        req = conn.read_request();
      } catch (const server::HttpError& e) {
        check_refusal(e.status, e.message);
        break;
      }
      if (!req) break;
      if (req->body.size() > limits.max_body_bytes || bodies.held_bytes() > bodies.limit_bytes())
        __builtin_trap();
      try {
        if (!server::apply_browser_policy(policy, *req, conn)) conn.send(200, "text/plain", "");
      } catch (const server::ApiError& e) {
        check_refusal(e.status, e.message);
        conn.send(e.status, "application/json", server::error_json(e));
      }
      req.reset();
      conn.release_body();
      if (!conn.keep_alive()) break;
    }
  }
  if (bodies.held_bytes() != 0) __builtin_trap();  // every body handed back
  ::close(fds[1]);
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
    switch (data[0] % 4) {
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
      case 3:
        fuzz_connection(rest);
        break;
    }
  } catch (const server::HttpError&) {
  } catch (const server::ApiError&) {
  } catch (const base::Error&) {
  }
  return 0;
}
