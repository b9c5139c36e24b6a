// `deltafin serve`: the OpenAI-compatible HTTP API on a model (docs/SERVER.md).
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "command.h"
#include "load_engine.h"
#include "server/server.h"
#include "setup/expert_source.h"
#include "setup/repo.h"
#include "speculation_flags.h"
#include "stream_flags.h"

namespace deltafin::apps {
namespace {

long long positive(Args& args, const char* name, long long fallback, long long max) {
  return read_positive_flag(args, "serve", name, fallback, max);
}

// A comma-separated flag value as lower-case items; an empty item is an error naming the flag.
std::vector<std::string> list_flag(Args& args, const char* name) {
  std::vector<std::string> out;
  if (!args.has(name)) return out;
  std::stringstream in(args.get(name));
  for (std::string item; std::getline(in, item, ',');) {
    for (char& c : item) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (item.empty())
      base::fail("deltafin serve: --", name, " needs a comma-separated list of non-empty values");
    out.push_back(item);
  }
  if (out.empty()) base::fail("deltafin serve: --", name, " is empty");
  return out;
}

// --allow-origin values: "*" or scheme://host[:port] as browsers send it in Origin.
void check_origins(const std::vector<std::string>& origins) {
  for (const std::string& o : origins) {
    const size_t scheme = o.find("://");
    if (o == "*") continue;
    if (scheme == std::string::npos || scheme == 0 || o.size() == scheme + 3 ||
        o.find('/', scheme + 3) != std::string::npos)
      base::fail("deltafin serve: --allow-origin '", o,
                 "' is not an origin: give scheme://host[:port] (no path), e.g. "
                 "http://localhost:3000, or *");
  }
}

int run_serve(Args& args) {
  server::ServeOptions o;
  o.host = args.get("host", o.host);
  o.port = static_cast<int>(args.get_int("port", o.port));
  if (o.port < 0 || o.port > 65535) base::fail("deltafin serve: --port must be 0..65535");
  const std::string model_flag = args.get("model");
  // An empty key given on purpose is a mistake (an unset shell variable), not "no key".
  if (args.has("api-key")) {
    o.service.api_key = args.get("api-key");
    if (o.service.api_key.empty())
      base::fail(
          "deltafin serve: --api-key is empty; give a key, or leave the flag out to serve "
          "without one");
  } else if (const char* env = std::getenv("DELTAFIN_API_KEY")) {
    o.service.api_key = env;
    if (o.service.api_key.empty())
      base::fail(
          "deltafin serve: DELTAFIN_API_KEY is set but empty; give a key, or unset it to "
          "serve without one");
  }
  o.http.max_body_bytes =
      static_cast<uint64_t>(positive(args, "max-request-bytes", 8 << 20, 1LL << 34));
  o.http.read_timeout_ms =
      static_cast<int>(positive(args, "request-timeout-ms", o.http.read_timeout_ms, 3'600'000));
  o.http.max_connections =
      static_cast<int>(positive(args, "max-connections", o.http.max_connections, 10'000));
  o.http.write_timeout_ms =
      static_cast<int>(positive(args, "write-timeout-ms", o.http.write_timeout_ms, 3'600'000));
  long long body_memory = 0;
  if (args.has("max-body-memory")) {
    const std::string text = args.get("max-body-memory");
    try {
      body_memory = static_cast<long long>(base::parse_byte_size(text));
    } catch (const std::exception& e) {
      base::fail("deltafin serve: --max-body-memory: ", e.what());
    }
    if (body_memory <= 0)
      base::fail("deltafin serve: --max-body-memory must be positive (got '", text, "')");
  }
  o.shutdown_grace_ms = static_cast<int>(
      read_positive_flag(args, "serve", "shutdown-grace-ms", o.shutdown_grace_ms, 3'600'000));
  o.service.browser.allowed_origins = list_flag(args, "allow-origin");
  check_origins(o.service.browser.allowed_origins);
  o.service.browser.allowed_hosts = list_flag(args, "allow-host");
  o.service.max_tokens_limit = static_cast<int>(positive(args, "max-tokens-limit", 8192, INT_MAX));
  o.service.memo = !args.flag("no-memo");
  o.service.reuse = !args.flag("no-reuse");
  o.service.model_id = args.get("model-id");
  o.service.speculation = read_speculation_flags(args, "serve");
  EngineOptions engine;
  read_chunk_flag(args, "serve", &engine);
  read_stream_flags(args, &engine);
  engine.drafters = drafters_for(o.service.speculation);
  args.check_done();

  engine.model_dir = server::resolve_model_dir(model_flag, setup::default_model_dir());
  setup::warn_if_streaming(engine.model_dir);
  std::unique_ptr<Engine> loaded = load_engine(engine);
  log_model_plan(*loaded, server::model_id(engine.model_dir), engine.model_dir);
  // Request bodies are part of the memory plan: by default 1/64 of the budget, at most 256 MiB,
  // and never less than one largest body.
  const uint64_t budget = loaded->memory_plan().budget_bytes;
  o.http.max_body_memory_bytes =
      body_memory > 0 ? static_cast<uint64_t>(body_memory)
                      : std::max<uint64_t>(o.http.max_body_bytes,
                                           std::min<uint64_t>(256ull << 20, budget / 64));
  if (o.http.max_body_memory_bytes < o.http.max_body_bytes)
    base::fail("deltafin serve: --max-body-memory (", o.http.max_body_memory_bytes,
               " bytes) is less than --max-request-bytes (", o.http.max_body_bytes,
               "): no body of the largest size could be read");
  // The bound address is this server's name too; a wildcard one makes every IP literal so.
  std::string bound = o.host;
  for (char& c : bound) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (bound == "0.0.0.0" || bound == "::" || bound.empty()) o.service.browser.any_ip_literal = true;
  o.service.browser.allowed_hosts.push_back(bound.find(':') != std::string::npos ? "[" + bound + "]"
                                                                                 : bound);
  // A chat format whose special tokens the tokenizer lacks would answer every chat request with
  // 500: make its response parser once now, as `run --chat` does, and refuse the folder.
  if (const ChatFormat* format = loaded->text().chat()) {
    try {
      format->response({});
    } catch (const std::exception& e) {
      base::fail("deltafin serve: ", engine.model_dir,
                 ": the tokenizer cannot serve the chat format (", e.what(), ")");
    }
  }
  if (o.host != "127.0.0.1" && o.host != "localhost" && o.host != "::1" &&
      o.service.api_key.empty())
    base::log_warn("serve: listening on ", o.host,
                   " without an API key: anyone who can reach it can use it (--api-key)");
  const auto& origins = o.service.browser.allowed_origins;
  if (std::find(origins.begin(), origins.end(), "*") != origins.end() && o.service.api_key.empty())
    base::log_warn(
        "serve: --allow-origin '*' without an API key: any web page you visit can use "
        "the server (--api-key)");
  server::serve(*loaded, engine.model_dir, o);
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(serve, "serve",
                 "OpenAI-compatible HTTP API: [--host 127.0.0.1] [--port 8000] [--model DIR] "
                 "[--api-key KEY] [--max-request-bytes N] [--request-timeout-ms N] "
                 "[--max-connections N] [--write-timeout-ms N] [--max-body-memory SIZE] "
                 "[--shutdown-grace-ms N] [--allow-origin ORIGIN,...|*] [--allow-host NAME,...] "
                 "[--max-tokens-limit N] [--no-memo] "
                 "[--no-reuse] [--model-id NAME] [--speculate auto|off|ngram --draft-max N] "
                 "[--memory-budget SIZE --experts ...] "
                 "(docs/SERVER.md)",
                 run_serve);

}  // namespace deltafin::apps
