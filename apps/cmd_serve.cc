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
#include "stream_flags.h"

namespace deltafin::apps {
namespace {

long long positive(Args& args, const char* name, long long fallback, long long max) {
  const long long v = args.get_int(name, fallback);
  if (v < 1 || v > max) base::fail("deltafin serve: --", name, " must be between 1 and ", max);
  return v;
}

int run_serve(Args& args) {
  server::ServeOptions o;
  o.host = args.get("host", o.host);
  o.port = static_cast<int>(args.get_int("port", o.port));
  if (o.port < 0 || o.port > 65535) base::fail("deltafin serve: --port must be 0..65535");
  const std::string model_flag = args.get("model");
  o.service.api_key = args.get("api-key");
  if (o.service.api_key.empty())
    if (const char* env = std::getenv("DELTAFIN_API_KEY")) o.service.api_key = env;
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
  EngineOptions engine;
  engine.attention_chunk_tokens =
      static_cast<int>(positive(args, "chunk", engine.attention_chunk_tokens, 1 << 16));
  read_stream_flags(args, &engine);
  args.check_done();

  engine.model_dir = server::resolve_model_dir(model_flag, setup::default_model_dir());
  setup::warn_if_streaming(engine.model_dir);
  std::unique_ptr<Engine> loaded = load_engine(engine);
  log_model_plan(*loaded, server::model_id(engine.model_dir), engine.model_dir);
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
                 "[--no-reuse] [--model-id NAME] [--memory-budget SIZE --experts ...] "
                 "(docs/SERVER.md)",
                 run_serve);

}  // namespace deltafin::apps
