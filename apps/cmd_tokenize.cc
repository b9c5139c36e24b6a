// `deltafin tokenize`: the ids (or pre-tokenizer pieces) of a file's whole text, as one JSON array
// on one line. Verification scripts compare this output with other tokenizer implementations.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/stopwatch.h"
#include "command.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::apps {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) base::fail("cannot open input file ", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void print_ids(const std::vector<int32_t>& ids) {
  std::string line = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ',';
    line += std::to_string(ids[i]);
  }
  line += "]\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
}

// Encodes `text` n_runs times and logs MB/s per run (min/median/max): the figure the speed goal
// is stated in, without the vocabulary load that a wall-clock timing of the command includes.
void log_timing(const tokenizer::Tokenizer& tok, const std::string& text, int n_runs) {
  std::vector<double> mb_per_s;
  for (int run = 0; run < n_runs; ++run) {
    const base::Stopwatch encode_time;
    const auto ids = tok.encode_ordinary(text);
    mb_per_s.push_back(static_cast<double>(text.size()) / 1e6 / encode_time.elapsed_seconds());
  }
  std::sort(mb_per_s.begin(), mb_per_s.end());
  char line[200];
  std::snprintf(line, sizeof(line),
                "%s encode_ordinary %.2f MB x %d runs: MB/s min %.1f median %.1f max %.1f",
                tok.kind_name(), text.size() / 1e6, n_runs, mb_per_s.front(),
                mb_per_s[mb_per_s.size() / 2], mb_per_s.back());
  base::log_info(line);
}

// `--tokenizer-json FILE`: a Hugging Face tokenizer.json instead of a tiktoken vocabulary. With
// --decode the input is a JSON array of ids and the output their decoded text.
int run_tokenize_hf(Args& args, const std::string& json_path) {
  const std::string input = args.required("input");
  const bool pieces = args.flag("pieces");
  const bool markup = args.flag("markup");
  const bool decode = args.flag("decode");
  const bool batch = args.flag("batch");
  const int n_timing_runs = static_cast<int>(args.get_int("timing-runs", 0));
  args.check_done();
  const base::Stopwatch load_time;
  const auto tok = tokenizer::load_hf_tokenizer(json_path);
  base::log_info("loaded " + json_path + " in " +
                 std::to_string(static_cast<int>(load_time.elapsed_seconds() * 1000)) + " ms");
  const std::string text = read_file(input);
  if (batch) {
    // One process for a whole corpus: loading the vocabulary dominates a single short string.
    for (const auto& item : nlohmann::json::parse(text)) {
      const auto s = item.get<std::string>();
      const auto ids = markup ? tok.encode_markup(s) : tok.encode_ordinary(s);
      const nlohmann::json line = {{"ids", ids}, {"text", tok.decode(ids)}};
      std::printf("%s\n",
                  line.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict).c_str());
    }
    return 0;
  }
  if (decode) {
    const auto ids = nlohmann::json::parse(text).get<std::vector<int32_t>>();
    const std::string out = tok.decode(ids);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  if (pieces) {
    const nlohmann::json out = tok.pieces(text);
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  print_ids(markup ? tok.encode_markup(text) : tok.encode_ordinary(text));
  if (n_timing_runs > 0) log_timing(tok, text, n_timing_runs);
  return 0;
}

int run_tokenize(Args& args) {
  const std::string json_path = args.get("tokenizer-json");
  if (!json_path.empty()) return run_tokenize_hf(args, json_path);
  const auto pattern = tokenizer::parse_pattern(args.required("pattern"));
  const std::string input = args.required("input");
  const bool pieces = args.flag("pieces");
  const bool markup = args.flag("markup");
  const int n_timing_runs = static_cast<int>(args.get_int("timing-runs", 0));
  const std::string vocab = pieces ? args.get("vocab") : args.required("vocab");
  const std::string special_config = args.get("special-config");
  args.check_done();

  const std::string text = read_file(input);
  if (pieces) {
    // The pieces are the input's own bytes; invalid UTF-8 is shown as U+FFFD in the JSON.
    const auto split = tokenizer::Tokenizer::pieces(pattern, text);
    const nlohmann::json out = split;
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  const auto tok = tokenizer::Tokenizer::load(vocab, pattern, special_config);
  print_ids(markup ? tok.encode_markup(text) : tok.encode_ordinary(text));
  if (n_timing_runs > 0) log_timing(tok, text, n_timing_runs);
  return 0;
}

}  // namespace

// Options: --vocab tiktoken.model --pattern kimi|o200k|cl100k --input FILE
// or: --tokenizer-json tokenizer.json --input FILE [--decode: FILE holds ids, print their text]
// [--batch: FILE holds a JSON array of strings; prints {"ids": [...], "text": decoded} per string]
// [--special-config tokenizer_config.json] [--markup: trusted text, special tokens allowed]
// [--pieces: print the pre-tokenizer pieces instead; no vocabulary needed]
// [--timing-runs N: also log encode speed over N runs to stderr]
DELTAFIN_COMMAND(tokenize, "tokenize", "print the token ids of a file's text as a JSON array",
                 run_tokenize);

}  // namespace deltafin::apps
