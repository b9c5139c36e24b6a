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
                tokenizer::pattern_name(tok.pattern()), text.size() / 1e6, n_runs, mb_per_s.front(),
                mb_per_s[mb_per_s.size() / 2], mb_per_s.back());
  base::log_info(line);
}

int run_tokenize(Args& args) {
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
// [--special-config tokenizer_config.json] [--markup: trusted text, special tokens allowed]
// [--pieces: print the pre-tokenizer pieces instead; no vocabulary needed]
// [--timing-runs N: also log encode speed over N runs to stderr]
DELTAFIN_COMMAND(tokenize, "tokenize", "print the token ids of a file's text as a JSON array",
                 run_tokenize);

}  // namespace deltafin::apps
