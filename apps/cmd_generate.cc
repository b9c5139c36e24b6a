// `deltafin generate --model DIR --ids 1,2,3 --max-new N [--ignore-eos] [--stats]` plus the
// streaming and speculation flags (stream_flags.h, speculation_flags.h): greedy decoding; the
// generated ids go to stdout as one JSON array on one line, timings (and with --stats one line per
// token) to stderr.
#include <cstdio>

#include "base/log.h"
#include "command.h"
#include "deltafin/engine.h"
#include "load_engine.h"
#include "setup/expert_source.h"
#include "speculation_flags.h"
#include "stream_flags.h"
#include "token_ids.h"

namespace deltafin::apps {
namespace {

int run_generate(Args& args) {
  EngineOptions options;
  options.model_dir = args.required("model");
  const std::vector<int32_t> ids = parse_token_ids(args.required("ids"));
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(args.get_int("max-new", 16));
  gen.stop_at_eos = !args.flag("ignore-eos");
  gen.speculation = read_speculation_flags(args, "generate");
  read_chunk_flag(args, "generate", &options);
  read_stream_flags(args, &options);
  options.drafters = drafters_for(gen.speculation);
  const bool stats = args.flag("stats");
  args.check_done();
  if (gen.max_new_tokens < 0) base::fail("deltafin generate: --max-new must be >= 0");

  setup::warn_if_streaming(options.model_dir);  // experts still remote make the first tokens slow
  std::unique_ptr<Engine> engine = load_engine(options);
  std::unique_ptr<Session> session = engine->new_session();
  std::unique_ptr<TokenStatsPrinter> printer;
  if (stats) printer = std::make_unique<TokenStatsPrinter>(*engine);
  int n_generated = 0;
  if (printer) {
    gen.on_pass = [](const PassReport& p) {
      if (p.drafted > 0)
        base::log_info("verify pass: ", p.rows, " rows, ", p.accepted, " of ", p.drafted,
                       " drafted ids accepted (", p.decision, "), ", p.ms, " ms");
    };
  }
  const GenerateResult result = session->generate(ids, gen, [&](int32_t) {
    // The first id comes after the prompt's pass; each later one after one decode pass.
    if (printer)
      printer->mark(n_generated == 0 ? "prompt" : "token " + std::to_string(n_generated));
    ++n_generated;
    return true;
  });
  std::printf("%s\n", token_ids_json(result.ids).c_str());
  std::fflush(stdout);
  const SessionStats& s = session->stats();
  base::log_info("prefill: ", s.prefill_tokens, " tokens in ", s.prefill_ms, " ms (",
                 s.prefill_tokens ? s.prefill_ms / s.prefill_tokens : 0.0,
                 " ms/token); decode: ", s.decode_tokens, " tokens in ", s.decode_ms, " ms (",
                 s.decode_tokens ? s.decode_ms / s.decode_tokens : 0.0, " ms/token)");
  if (const std::string spec = describe_speculation(s, gen.speculation); !spec.empty())
    base::log_info(spec);
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(generate, "generate",
                 "greedy decoding from --ids for --max-new tokens; prints the ids as JSON",
                 run_generate);

}  // namespace deltafin::apps
