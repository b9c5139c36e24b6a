// `deltafin serve`: the OpenAI-compatible HTTP API on a model (docs/SERVER.md).
#include <climits>
#include <cstdlib>

#include "base/error.h"
#include "base/log.h"
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
  o.service.max_tokens_limit = static_cast<int>(positive(args, "max-tokens-limit", 8192, INT_MAX));
  o.service.memo = !args.flag("no-memo");
  o.service.reuse = !args.flag("no-reuse");
  o.service.model_id = args.get("model-id");
  o.service.speculation = read_speculation_flags(args, "serve");
  EngineOptions engine;
  read_chunk_flag(args, "serve", &engine);
  read_stream_flags(args, &engine);
  args.check_done();

  engine.model_dir = server::resolve_model_dir(model_flag, setup::default_model_dir());
  setup::warn_if_streaming(engine.model_dir);
  std::unique_ptr<Engine> loaded = load_engine(engine);
  log_model_plan(*loaded, server::model_id(engine.model_dir), engine.model_dir);
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
  server::serve(*loaded, engine.model_dir, o);
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(serve, "serve",
                 "OpenAI-compatible HTTP API: [--host 127.0.0.1] [--port 8000] [--model DIR] "
                 "[--api-key KEY] [--max-request-bytes N] [--request-timeout-ms N] "
                 "[--max-connections N] "
                 "[--max-tokens-limit N] [--no-memo] "
                 "[--no-reuse] [--model-id NAME] [--speculate auto|off|ngram --draft-max N] "
                 "[--memory-budget SIZE --experts ...] "
                 "(docs/SERVER.md)",
                 run_serve);

}  // namespace deltafin::apps
