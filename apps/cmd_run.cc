// `deltafin run`: one prompt from the command line, streamed as it is generated. --chat renders
// the model's chat format and shows the reasoning and the answer apart; without it the prompt is
// continued as raw text. Ctrl-C stops after the current token and keeps what was printed.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/log.h"
#include "base/stopwatch.h"
#include "command.h"
#include "load_engine.h"
#include "server/server.h"
#include "setup/expert_source.h"
#include "setup/repo.h"
#include "speculation_flags.h"
#include "stream_flags.h"

namespace deltafin::apps {
namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) { g_interrupted.store(true); }

// Prints deltas: on a terminal the reasoning is dimmed and the answer plain; otherwise each
// channel gets a label line, so that logs and pipes stay readable.
class Printer {
 public:
  explicit Printer(bool chat) : chat_(chat) {
    color_ = isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
  }
  void print(const Delta& d) {
    using Kind = Delta::Kind;
    if (!started_ || d.kind != channel_) {
      if (color_ && started_ && channel_ == Kind::kReasoning) std::fputs("\x1b[0m", stdout);
      if (started_) std::fputs("\n", stdout);
      if (chat_ && !color_ && d.kind != Kind::kToolCall)
        std::fputs(d.kind == Kind::kReasoning ? "[reasoning]\n" : "[answer]\n", stdout);
      if (color_ && d.kind == Kind::kReasoning) std::fputs("\x1b[2m", stdout);
      channel_ = d.kind;
    }
    started_ = true;
    if (d.kind == Kind::kToolCall) {
      std::printf("[tool call] %s %s\n", d.call.name.c_str(), d.call.arguments.c_str());
    } else {
      std::fputs(d.text.c_str(), stdout);
    }
    std::fflush(stdout);
  }
  void end() {
    if (color_ && started_ && channel_ == Delta::Kind::kReasoning) std::fputs("\x1b[0m", stdout);
    if (started_) std::fputs("\n", stdout);
    std::fflush(stdout);
  }

 private:
  bool chat_, color_ = false, started_ = false;
  Delta::Kind channel_ = Delta::Kind::kContent;
};

void print_stats(const SessionStats& s, const std::vector<double>& token_ms) {
  std::fprintf(stderr, "stats: prompt %lld tokens in %.1f ms (%.1f tok/s)\n",
               static_cast<long long>(s.prefill_tokens), s.prefill_ms,
               s.prefill_ms > 0 ? s.prefill_tokens * 1000.0 / s.prefill_ms : 0.0);
  if (token_ms.empty()) return;
  std::vector<double> sorted = token_ms;
  std::sort(sorted.begin(), sorted.end());
  double total = 0;
  for (double ms : token_ms) total += ms;
  std::fprintf(stderr,
               "stats: %zu tokens in %.1f ms (%.2f tok/s); per token: min %.2f / median %.2f / "
               "max %.2f ms (the first includes the prompt)\n",
               token_ms.size(), total, total > 0 ? token_ms.size() * 1000.0 / total : 0.0,
               sorted.front(), sorted[sorted.size() / 2], sorted.back());
}

int run_run(Args& args) {
  const std::string model_flag = args.get("model");
  const bool chat = args.flag("chat");
  const std::string prompt = args.required("prompt");
  const std::string system = args.get("system");
  const bool no_think = args.flag("no-think");
  const std::string effort = args.get("effort");
  const bool stats = args.flag("stats");
  GenerateOptions gen;
  gen.max_new_tokens = static_cast<int>(args.get_int("max-new", chat ? 2048 : 256));
  // The ranges of the server's request fields (temperature 0..2, top_p in (0, 1]).
  gen.temperature = static_cast<float>(read_number_flag(args, "run", "temperature", 0.0, 0, 2));
  gen.top_p = static_cast<float>(read_number_flag(args, "run", "top-p", 1.0, 0, 1));
  gen.top_k = static_cast<int>(args.get_int("top-k", 0));
  gen.seed = static_cast<uint64_t>(args.get_int("seed", 0));
  gen.speculation = read_speculation_flags(args, "run");
  gen.speculation.chat = chat;
  EngineOptions engine;
  read_chunk_flag(args, "run", &engine);
  read_stream_flags(args, &engine);
  engine.drafters = drafters_for(gen.speculation);
  args.check_done();
  if (gen.max_new_tokens < 1) base::fail("deltafin run: --max-new must be at least 1");
  if (gen.temperature < 0 || !(gen.top_p > 0 && gen.top_p <= 1) || gen.top_k < 0)
    base::fail("deltafin run: need --temperature >= 0, 0 < --top-p <= 1, --top-k >= 0");
  if (!chat && (!system.empty() || no_think || !effort.empty()))
    base::fail("deltafin run: --system, --no-think and --effort need --chat");
  if (prompt.empty()) base::fail("deltafin run: --prompt is empty");

  engine.model_dir = server::resolve_model_dir(model_flag, setup::default_model_dir());
  setup::warn_if_streaming(engine.model_dir);
  std::unique_ptr<Engine> loaded = load_engine(engine);
  if (stats) log_model_plan(*loaded, server::model_id(engine.model_dir), engine.model_dir);
  const Text& text = loaded->text();

  std::vector<int32_t> ids;
  std::unique_ptr<TextStream> pipeline;
  if (chat) {
    const ChatFormat* format = text.chat();
    if (format == nullptr)
      base::fail("deltafin run: ", engine.model_dir, " (", loaded->info().arch,
                 ") has no chat format here; run it without --chat");
    nlohmann::ordered_json input = {{"thinking", !no_think}};
    input["messages"] = nlohmann::ordered_json::array();
    if (!system.empty()) input["messages"].push_back({{"role", "system"}, {"content", system}});
    input["messages"].push_back({{"role", "user"}, {"content", prompt}});
    if (!effort.empty()) input["thinking_effort"] = effort;
    ids = format->render(input);
    int n_calls = 0;
    pipeline = format->response(
        {!no_think, {}, false, [&n_calls] { return "call_" + std::to_string(++n_calls); }});
  } else {
    ids = text.encode(prompt);
    pipeline = text.completion({});
  }

  // Ctrl-C ends the generation after the current token; a second one kills the process.
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);

  Printer printer(chat);
  std::vector<Delta> deltas;
  std::vector<double> token_ms;
  // Per pass (the prompt's, then one per token): time, bytes read, cache hits, prefetch recall.
  // Printed after the text, so that they do not break it up on a terminal.
  std::vector<std::string> pass_lines;
  StreamStats last_stats = loaded->stream_stats();
  base::Stopwatch token_time;
  std::unique_ptr<Session> session = loaded->new_session();
  // Ctrl-C during the prompt: polled between layers, so a long prefill stops within a second.
  gen.cancel = [] { return g_interrupted.load(); };
  gen.cancel_between_layers = true;
  if (stats) {
    int n_pass = 0;
    gen.on_pass = [&pass_lines, n_pass](const PassReport& p) mutable {
      ++n_pass;
      if (p.drafted == 0) return;
      pass_lines.push_back(base::str_cat("pass ", n_pass, ": verify ", p.rows, " rows, ",
                                         p.accepted, " of ", p.drafted, " drafted ids accepted (",
                                         p.decision, "), ", p.ms, " ms"));
    };
  }
  const GenerateResult result = session->generate(ids, gen, [&](int32_t id) {
    const double ms = token_time.elapsed_ms();
    token_time.restart();
    token_ms.push_back(ms);
    if (stats) {
      // Each id comes after the pass that made its logits: the prompt's, then the previous id's.
      const StreamStats s = loaded->stream_stats();
      pass_lines.push_back(
          base::str_cat(token_ms.size() == 1 ? base::str_cat("prompt (", ids.size(), " ids)")
                                             : base::str_cat("token ", token_ms.size()),
                        ": ", describe_pass(pass_figures(last_stats, s, ms / 1e3))));
      last_stats = s;
    }
    if (g_interrupted.load()) return false;
    const bool more = pipeline->push(id, deltas);
    for (const Delta& d : deltas) printer.print(d);
    deltas.clear();
    return more;
  });
  pipeline->finish(deltas);
  for (const Delta& d : deltas) printer.print(d);
  printer.end();
  signal(SIGINT, SIG_DFL);
  if (stats) {
    for (const std::string& line : pass_lines) std::fprintf(stderr, "stats: %s\n", line.c_str());
    print_stats(session->stats(), token_ms);
    if (const std::string spec = describe_speculation(session->stats(), gen.speculation);
        !spec.empty())
      std::fprintf(stderr, "stats: %s\n", spec.c_str());
  }
  if (g_interrupted.load()) {
    std::fprintf(stderr, "run: interrupted after %zu tokens\n", result.ids.size());
    return 130;
  }
  if (result.stop == StopReason::kMaxTokens)
    base::log_info("run: stopped at --max-new ", gen.max_new_tokens, " tokens");
  if (result.stop == StopReason::kContextFull)
    base::log_warn("run: stopped: the context of ", loaded->info().max_context_tokens,
                   " tokens is full (--max-context)");
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(
    run, "run",
    "generate from --prompt TEXT: --chat (the model's chat format: reasoning and answer) or raw "
    "continuation; [--model DIR] [--max-new N] [--temperature T --top-p P --top-k K "
    "--seed S] [--system TEXT] [--no-think] [--effort low|high|max] [--stats] "
    "[--speculate auto|off|ngram --draft-max N --draft-min N] "
    "[--memory-budget SIZE --experts auto|mapped|stream ...] (docs/CLI.md)",
    run_run);

}  // namespace deltafin::apps
