// `deltafin eval`: the quality harness (issue #21, docs/QUALITY.md). Runs the exact path and a
// variant (any set of engine flags) over the same ids, one engine after the other (never both in
// memory), and reports per position and in total KL(exact || variant), the corpus's NLL under
// each, top-1 agreement and top-5 overlap, and where greedy continuations of prompts first
// differ. The exact run's logits go to a safetensors file, streamed a pass at a time (a temporary
// one, or --save-exact FILE to keep it for later variants through --exact-from FILE).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "base/error.h"
#include "base/log.h"
#include "base/memory_budget.h"
#include "base/stopwatch.h"
#include "command.h"
#include "deltafin/engine.h"
#include "eval/divergence.h"
#include "eval/exact_file.h"
#include "eval/flag_words.h"
#include "eval_flags.h"
#include "load_engine.h"
#include "server/server.h"
#include "setup/expert_source.h"
#include "setup/repo.h"
#include "token_ids.h"

namespace deltafin::apps {
namespace {

using base::fail;
using Ids = std::vector<int32_t>;

constexpr int64_t kDefaultWindow = 512;
constexpr int64_t kDefaultMaxNew = 32;
constexpr const char* kDefaultMaxSaved = "4G";

// Where the corpus and the prompts come from; text is tokenized by the model's own tokenizer
// (raw text, no BOS), as `run` tokenizes a raw prompt.
struct InputFlags {
  std::string ids, text, corpus_file, prompt_ids, prompts_file;
  int64_t max_positions = 0;  // 0: all
  bool corpus() const { return !ids.empty() || !text.empty() || !corpus_file.empty(); }
  bool prompts() const { return !prompt_ids.empty() || !prompts_file.empty(); }
};

std::string read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("deltafin eval: cannot read ", flag, " ", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Inputs {
  Ids corpus;
  std::vector<Ids> prompts;
};

Inputs read_inputs(const InputFlags& f, const Engine& engine) {
  Inputs in;
  if (!f.ids.empty()) in.corpus = parse_token_ids(f.ids);
  if (!f.text.empty()) in.corpus = engine.text().encode(f.text);
  if (!f.corpus_file.empty())
    in.corpus = engine.text().encode(read_text_file(f.corpus_file, "--corpus"));
  if (f.max_positions > 0 && static_cast<int64_t>(in.corpus.size()) > f.max_positions)
    in.corpus.resize(static_cast<size_t>(f.max_positions));
  if (!f.prompt_ids.empty()) {
    std::string_view rest = f.prompt_ids;  // "1,2,3;4,5"
    while (true) {
      const size_t semi = rest.find(';');
      in.prompts.push_back(parse_token_ids(rest.substr(0, semi)));
      if (semi == std::string_view::npos) break;
      rest.remove_prefix(semi + 1);
    }
  }
  if (!f.prompts_file.empty()) {
    std::istringstream lines(read_text_file(f.prompts_file, "--prompts"));
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) in.prompts.push_back(engine.text().encode(line));
  }
  const int64_t vocab = engine.info().vocab_size;
  const auto check_ids = [&](const Ids& ids, const char* what) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= vocab)
        fail("deltafin eval: ", what, " id ", ids[i], " (item ", i + 1,
             ") is outside the model's vocabulary of ", vocab);
  };
  check_ids(in.corpus, "corpus");
  for (const Ids& p : in.prompts) {
    if (p.empty()) fail("deltafin eval: a greedy prompt is empty");
    check_ids(p, "prompt");
  }
  return in;
}

eval::ModelIdentity identity_of(const Engine& engine, const std::string& model_dir,
                                const std::string& weights_hash) {
  const ModelInfo& info = engine.info();
  return {info.arch,
          info.vocab_size,
          info.hidden_size,
          info.n_layers,
          eval::config_hash((std::filesystem::path(model_dir) / "config.json").string()),
          weights_hash};
}

void check_fits(const Engine& engine, const eval::ExactRunPlan& plan) {
  const int64_t context = engine.info().max_context_tokens;
  if (plan.window_tokens > context)
    fail("deltafin eval: --window ", plan.window_tokens, " is more than the ", context,
         " positions a session holds (--max-context)");
  for (size_t i = 0; i < plan.prompts.size(); ++i)
    if (static_cast<int64_t>(plan.prompts[i].size()) + plan.max_new_tokens > context)
      fail("deltafin eval: prompt ", i, " (", plan.prompts[i].size(), " ids) and --max-new ",
           plan.max_new_tokens, " exceed the ", context, " positions a session holds");
}

// The corpus through `engine`, each window a fresh sequence, a prefill group of rows per pass:
// fn(first corpus row, the pass's logits [rows, vocab]).
void for_each_pass(Engine& engine, const Ids& corpus, int64_t window,
                   const std::function<void(int64_t, std::span<const float>)>& fn) {
  std::unique_ptr<Session> session = engine.new_session();
  const auto group = static_cast<int64_t>(std::max(1, engine.memory_plan().prefill_group_tokens));
  const auto n = static_cast<int64_t>(corpus.size());
  for (int64_t start = 0; start < n; start += window) {
    session->reset();
    const int64_t end = std::min(n, start + window);
    for (int64_t first = start; first < end; first += group) {
      const int64_t rows = std::min(group, end - first);
      const std::vector<float> logits =
          session->forward(std::span(corpus).subspan(first, rows), /*all_rows=*/true);
      fn(first, logits);
    }
  }
}

std::vector<Ids> run_greedy(Engine& engine, const std::vector<Ids>& prompts, int64_t max_new,
                            const SpeculationOptions& speculation) {
  std::vector<Ids> out;
  for (const Ids& prompt : prompts) {
    std::unique_ptr<Session> session = engine.new_session();
    GenerateOptions gen;
    gen.max_new_tokens = static_cast<int>(max_new);
    gen.stop_at_eos = false;  // fixed lengths: a divergence is found wherever it is
    gen.speculation = speculation;
    out.push_back(session->generate(prompt, gen).ids);
  }
  return out;
}

struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) std::filesystem::remove(path);
  }
};

std::string fixed(double v, int digits = 6) {
  char s[64];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}
std::string general(double v) {
  char s[64];
  std::snprintf(s, sizeof s, "%.6g", v);
  return s;
}

// The comparison: what the JSON holds, and the human summary built from it.
struct Comparison {
  eval::Tally tally;
  std::vector<Ids> exact_greedy, variant_greedy;
};

nlohmann::json greedy_json(const Comparison& c, int64_t max_new) {
  nlohmann::json firsts = nlohmann::json::array();
  int diverged = 0;
  for (size_t i = 0; i < c.exact_greedy.size(); ++i) {
    const std::optional<int64_t> d = eval::first_difference(c.exact_greedy[i], c.variant_greedy[i]);
    firsts.push_back(d ? nlohmann::json(*d) : nlohmann::json(nullptr));
    diverged += d.has_value();
  }
  return {{"prompts", c.exact_greedy.size()},
          {"max_new", max_new},
          {"diverged", diverged},
          {"first_difference", firsts},
          {"exact_ids", c.exact_greedy},
          {"variant_ids", c.variant_greedy}};
}

nlohmann::json comparison_json(const Comparison& c, const eval::ExactRunPlan& plan,
                               bool per_position) {
  const eval::Summary s = c.tally.summary();
  nlohmann::json j;
  j["positions"] = s.positions;
  const nlohmann::json null = nullptr;
  if (s.positions > 0) {
    j["kl"] = {{"mean", s.kl.mean},
               {"p50", s.kl.p50},
               {"p99", s.kl.p99},
               {"max", s.kl.max},
               {"max_position", c.tally.positions()[static_cast<size_t>(s.kl.max_index)]}};
    j["nll"] = {{"exact", s.nll_exact},
                {"variant", s.nll_variant},
                {"difference", s.nll_variant - s.nll_exact}};
    j["perplexity"] = {{"exact", std::exp(s.nll_exact)}, {"variant", std::exp(s.nll_variant)}};
    j["top1_agreement"] = s.top1_agreement();
    j["top1_agreements"] = s.top1_agreements;
    j["top5_overlap"] = s.top5_overlap;
  } else {
    j["kl"] = j["nll"] = j["perplexity"] = j["top1_agreement"] = j["top5_overlap"] = null;
    j["top1_agreements"] = 0;
  }
  j["greedy"] = greedy_json(c, plan.max_new_tokens);
  j["matches_exact"] = (s.positions == 0 || (s.kl.max == 0 && s.top1_agreements == s.positions)) &&
                       j["greedy"]["diverged"] == 0;
  if (per_position) {
    nlohmann::json p = {{"position", c.tally.positions()}};
    for (const char* k :
         {"kl", "nll_exact", "nll_variant", "top1_exact", "top1_variant", "top5_overlap"})
      p[k] = nlohmann::json::array();
    for (const eval::PositionFigures& f : c.tally.figures()) {
      p["kl"].push_back(f.kl);
      p["nll_exact"].push_back(f.nll_exact);
      p["nll_variant"].push_back(f.nll_variant);
      p["top1_exact"].push_back(f.top1_exact);
      p["top1_variant"].push_back(f.top1_variant);
      p["top5_overlap"].push_back(f.top5_overlap);
    }
    j["per_position"] = std::move(p);
  }
  return j;
}

std::string summary_text(const nlohmann::json& r) {
  std::string out;
  const auto line = [&](const std::string& s) { out += s + "\n"; };
  line("eval: " + r["model"]["identity"].get<std::string>() + " (" +
       r["model"]["dir"].get<std::string>() + ")");
  const auto flags = [](const nlohmann::json& f) {
    const std::string s = f.get<std::string>();
    return s.empty() ? std::string("engine defaults") : s;
  };
  line("  exact:   " + flags(r["exact"]["flags"]) +
       (r["exact"]["from_file"].get<bool>()
            ? " (from " + r["exact"]["file"].get<std::string>() + ")"
            : ""));
  if (!r.contains("variant")) {
    line("  saved:   " + r["exact"]["file"].get<std::string>() + " (" +
         std::to_string(r["corpus_ids"].get<int64_t>()) + " corpus ids, " +
         std::to_string(r["prompts"].get<int64_t>()) + " prompts)");
    return out;
  }
  line("  variant: " + flags(r["variant"]["flags"]) +
       (r["variant"].value("lossy", false)
            ? " (lossy: " + r["variant"].value("spine_dtype", std::string()) + " spine)"
            : ""));
  const nlohmann::json& c = r["comparison"];
  const int64_t n = c["positions"];
  line("  corpus:  " + std::to_string(r["corpus_ids"].get<int64_t>()) + " ids in " +
       std::to_string(r["windows"].get<int64_t>()) + " window(s) of up to " +
       std::to_string(r["window_tokens"].get<int64_t>()) +
       " (each a fresh sequence): " + std::to_string(n) + " positions compared");
  if (n > 0) {
    const nlohmann::json& kl = c["kl"];
    line("  KL(exact || variant), nats: mean " + general(kl["mean"]) + ", p50 " +
         general(kl["p50"]) + ", p99 " + general(kl["p99"]) + ", max " + general(kl["max"]) +
         " (position " + std::to_string(kl["max_position"].get<int64_t>()) + ")");
    line("  NLL, nats per id: exact " + fixed(c["nll"]["exact"]) + " (perplexity " +
         general(c["perplexity"]["exact"]) + "), variant " + fixed(c["nll"]["variant"]) +
         " (perplexity " + general(c["perplexity"]["variant"]) + "), variant - exact " +
         general(c["nll"]["difference"]));
    line("  top-1 agreement: " + std::to_string(c["top1_agreements"].get<int64_t>()) + " / " +
         std::to_string(n) + " (" + fixed(c["top1_agreement"]) + "); top-5 overlap: mean " +
         fixed(c["top5_overlap"]));
  }
  const nlohmann::json& g = c["greedy"];
  if (g["prompts"].get<int64_t>() > 0) {
    const int64_t diverged = g["diverged"];
    line("  greedy:  " + std::to_string(g["prompts"].get<int64_t>()) + " prompt(s) x " +
         std::to_string(g["max_new"].get<int64_t>()) + " ids: " +
         (diverged == 0 ? std::string("all identical") : std::to_string(diverged) + " differ"));
    for (size_t i = 0; i < g["first_difference"].size(); ++i) {
      const nlohmann::json& d = g["first_difference"][i];
      if (d.is_null()) continue;
      const int64_t at = d;
      const auto id_at = [&](const char* k) {
        const nlohmann::json& ids = g[k][i];
        return at < static_cast<int64_t>(ids.size()) ? std::to_string(ids[at].get<int32_t>())
                                                     : std::string("none");
      };
      line("    prompt " + std::to_string(i) + ": first differs at generated id " +
           std::to_string(at) + " (exact " + id_at("exact_ids") + ", variant " +
           id_at("variant_ids") + ")");
    }
  }
  line(c["matches_exact"].get<bool>()
           ? "  result:  the variant matches the exact path (every KL 0, every top-1 equal, "
             "greedy continuations identical)"
           : "  result:  the variant differs from the exact path");
  return out;
}

int run_eval(Args& args) {
  const std::string model_dir =
      server::resolve_model_dir(args.get("model"), setup::default_model_dir());
  InputFlags in;
  in.ids = args.get("ids");
  in.text = args.get("text");
  in.corpus_file = args.get("corpus");
  in.prompt_ids = args.get("prompt-ids");
  in.prompts_file = args.get("prompts");
  in.max_positions = args.get_int("max-positions", 0);
  const int64_t window = args.get_int("window", kDefaultWindow);
  const int64_t max_new = args.get_int("max-new", kDefaultMaxNew);
  const std::string engine_text = args.get("engine-flags");
  const bool has_variant = args.has("variant");
  const std::string variant_text = args.get("variant");
  const std::string save_path = args.get("save-exact");
  const std::string from_path = args.get("exact-from");
  const uint64_t max_saved = base::parse_byte_size(args.get("max-saved-bytes", kDefaultMaxSaved));
  const bool json = args.flag("json");
  const bool per_position = args.flag("per-position");
  args.check_done();

  if (window < 2) fail("deltafin eval: --window must be at least 2 (a position needs a next id)");
  if (max_new < 1 || max_new > (1 << 20)) fail("deltafin eval: --max-new must be 1..1048576");
  if (in.max_positions < 0) fail("deltafin eval: --max-positions must be positive");
  if (int(!in.ids.empty()) + int(!in.text.empty()) + int(!in.corpus_file.empty()) > 1)
    fail("deltafin eval: give one of --ids, --text and --corpus");
  if (!save_path.empty() && !from_path.empty())
    fail("deltafin eval: --save-exact and --exact-from exclude each other");
  if (!from_path.empty() && !has_variant)
    fail("deltafin eval: --exact-from FILE needs --variant FLAGS to compare with it");
  if (!has_variant && save_path.empty())
    fail("deltafin eval: nothing to do: give --variant FLAGS (and/or --save-exact FILE)");
  if (from_path.empty() && !in.corpus() && !in.prompts())
    fail(
        "deltafin eval: no ids to run: give --ids, --text or --corpus (and/or --prompt-ids, "
        "--prompts)");

  // Both flag sets are read before anything loads, so a bad one costs nothing.
  const std::vector<std::string> engine_words = eval::split_flags(engine_text);
  const EngineFlags exact_flags = read_engine_flags(engine_words, model_dir, "--engine-flags");
  std::optional<EngineFlags> variant_flags;
  if (has_variant)
    variant_flags = read_engine_flags(
        eval::merge_flags(engine_words, eval::split_flags(variant_text)), model_dir, "--variant");

  std::optional<eval::ExactRunReader> saved;
  if (!from_path.empty()) saved.emplace(from_path);
  TempFile temp;
  std::string exact_file = from_path;
  eval::ExactRunPlan plan;
  std::vector<Ids> exact_greedy;
  setup::warn_if_streaming(model_dir);
  // Both runs read one folder: its weights' sample is hashed once.
  const std::string weights_hash = eval::weights_sample_hash(model_dir);

  if (!saved) {
    // The exact path: its greedy continuations, then its logits streamed to the file.
    base::Stopwatch clock;
    std::unique_ptr<Engine> engine = load_engine(exact_flags.engine);
    Inputs inputs = read_inputs(in, *engine);
    plan.model = identity_of(*engine, model_dir, weights_hash);
    plan.engine_flags = exact_flags.text;
    plan.window_tokens = window;
    plan.max_new_tokens = max_new;
    plan.corpus_ids = std::move(inputs.corpus);
    plan.prompts = std::move(inputs.prompts);
    check_fits(*engine, plan);
    if (save_path.empty()) {
      temp.path = (std::filesystem::temp_directory_path() /
                   ("deltafin-eval-" + std::to_string(getpid()) + "-exact.safetensors"))
                      .string();
      exact_file = temp.path;
    } else {
      exact_file = save_path;
    }
    eval::check_saved_bytes(plan, max_saved, exact_file);
    exact_greedy = run_greedy(*engine, plan.prompts, max_new, exact_flags.speculation);
    eval::ExactRunWriter writer(exact_file, plan, exact_greedy);
    for_each_pass(*engine, plan.corpus_ids, window,
                  [&](int64_t, std::span<const float> rows) { writer.append_logits(rows); });
    writer.finish();
    base::log_info("eval: exact path: ", plan.corpus_ids.size(), " corpus ids and ",
                   plan.prompts.size(), " prompts in ", fixed(clock.lap_seconds(), 2), " s → ",
                   exact_file);
    engine.reset();  // never two engines in memory
    saved.emplace(exact_file);
  }

  nlohmann::json report;
  const eval::ModelIdentity& model = saved->plan().model;
  report["model"] = {{"dir", model_dir},
                     {"identity", model.describe()},
                     {"arch", model.arch},
                     {"vocab_size", model.vocab_size},
                     {"config_fnv1a64", model.config_hash},
                     {"weights_sample_fnv1a64", model.weights_hash}};
  report["exact"] = {{"flags", saved->plan().engine_flags},
                     {"from_file", !from_path.empty()},
                     {"file", temp.path.empty() ? nlohmann::json(exact_file) : nullptr}};
  report["window_tokens"] = saved->plan().window_tokens;
  report["corpus_ids"] = saved->plan().corpus_ids.size();
  report["prompts"] = saved->plan().prompts.size();
  const auto n_corpus = static_cast<int64_t>(saved->plan().corpus_ids.size());
  report["windows"] = (n_corpus + saved->plan().window_tokens - 1) / saved->plan().window_tokens;

  if (variant_flags) {
    base::Stopwatch clock;
    std::unique_ptr<Engine> engine = load_engine(variant_flags->engine);
    eval::ExactRunPlan wanted;
    if (from_path.empty()) {
      wanted = saved->plan();
      wanted.model = identity_of(*engine, model_dir, weights_hash);
    } else {
      // Ids not given here are the file's; ids given must be the file's.
      Inputs inputs = read_inputs(in, *engine);
      wanted.model = identity_of(*engine, model_dir, weights_hash);
      wanted.engine_flags = saved->plan().engine_flags;
      wanted.window_tokens = args.has("window") ? window : saved->plan().window_tokens;
      wanted.max_new_tokens = args.has("max-new") ? max_new : saved->plan().max_new_tokens;
      wanted.corpus_ids = in.corpus() ? std::move(inputs.corpus) : saved->plan().corpus_ids;
      wanted.prompts = in.prompts() ? std::move(inputs.prompts) : saved->plan().prompts;
    }
    eval::check_same_run(saved->plan(), wanted, exact_file);
    const eval::ExactRunPlan& run = saved->plan();
    check_fits(*engine, run);

    Comparison c;
    c.exact_greedy = saved->greedy();
    c.variant_greedy =
        run_greedy(*engine, run.prompts, run.max_new_tokens, variant_flags->speculation);
    const auto vocab = static_cast<size_t>(run.model.vocab_size);
    std::vector<float> exact_rows;
    for_each_pass(*engine, run.corpus_ids, run.window_tokens,
                  [&](int64_t first, std::span<const float> rows) {
                    const size_t n_rows = rows.size() / vocab;
                    exact_rows.resize(rows.size());
                    saved->read_logits(first, exact_rows);
                    for (size_t r = 0; r < n_rows; ++r) {
                      const int64_t pos = first + static_cast<int64_t>(r);
                      // The last id of a window has no next id in its sequence.
                      if ((pos + 1) % run.window_tokens == 0 || pos + 1 >= n_corpus) continue;
                      const std::span<const float> e =
                          std::span<const float>(exact_rows).subspan(r * vocab, vocab);
                      const std::span<const float> v = rows.subspan(r * vocab, vocab);
                      for (const auto& [row, name] : {std::pair{e, "exact"}, {v, "variant"}})
                        if (const auto bad = eval::first_non_finite(row))
                          fail("deltafin eval: the ", name, " logits at corpus position ", pos,
                               " hold a non-finite value (id ", *bad, ")");
                      c.tally.add(pos, eval::compare_position(
                                           e, v, run.corpus_ids[static_cast<size_t>(pos + 1)]));
                    }
                  });
    base::log_info("eval: variant: ", run.corpus_ids.size(), " corpus ids and ", run.prompts.size(),
                   " prompts in ", fixed(clock.lap_seconds(), 2), " s");
    report["variant"] = {{"flags", variant_flags->text},
                         {"spine_dtype", engine->info().spine_dtype},
                         {"lossy", engine->info().lossy}};
    report["comparison"] = comparison_json(c, run, per_position);
  }

  const std::string text = summary_text(report);
  if (json) {
    std::fputs(text.c_str(), stderr);
    std::printf("%s\n", report.dump().c_str());
  } else {
    std::fputs(text.c_str(), stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(
    eval, "eval",
    "the quality harness: a variant's engine flags (--variant '...') against the exact path over "
    "--ids/--text/--corpus and --prompt-ids/--prompts: KL, NLL, top-1/top-5, greedy divergence",
    run_eval);

}  // namespace deltafin::apps
