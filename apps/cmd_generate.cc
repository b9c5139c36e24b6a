// `deltafin generate --model DIR --ids 1,2,3 --max-new N [--ignore-eos]`: greedy decoding; the
// generated ids go to stdout as one JSON array on one line, timings to stderr.
#include <cstdio>

#include "base/log.h"
#include "command.h"
#include "deltafin/engine.h"
#include "deltafin/token_ids.h"

namespace deltafin::apps {
namespace {

int run_generate(Args& args) {
  EngineOptions options;
  options.model_dir = args.required("model");
  const std::vector<int32_t> ids = parse_token_ids(args.required("ids"));
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(args.get_int("max-new", 16));
  gen.stop_at_eos = !args.flag("ignore-eos");
  options.prefill_chunk_tokens =
      static_cast<int>(args.get_int("chunk", options.prefill_chunk_tokens));
  args.check_done();
  if (gen.max_new_tokens < 0) base::fail("deltafin generate: --max-new must be >= 0");

  std::unique_ptr<Engine> engine = Engine::load(options);
  std::unique_ptr<Session> session = engine->new_session();
  const GenerateResult result = session->generate(ids, gen);
  std::printf("%s\n", token_ids_json(result.ids).c_str());
  std::fflush(stdout);
  const SessionStats& s = session->stats();
  base::log_info("prefill: ", s.prefill_tokens, " tokens in ", s.prefill_ms, " ms (",
                 s.prefill_tokens ? s.prefill_ms / s.prefill_tokens : 0.0,
                 " ms/token); decode: ", s.decode_tokens, " tokens in ", s.decode_ms, " ms (",
                 s.decode_tokens ? s.decode_ms / s.decode_tokens : 0.0, " ms/token)");
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(generate, "generate",
                 "greedy decoding from --ids for --max-new tokens; prints the ids as JSON",
                 run_generate);

}  // namespace deltafin::apps
