// Splitting, merging and reading the engine flags of `deltafin eval`'s two runs.
#include "eval_flags.h"

#include <map>

#include "base/error.h"
#include "command.h"
#include "speculation_flags.h"
#include "stream_flags.h"

namespace deltafin::apps {

std::vector<std::string> split_flags(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) base::fail("engine flags '", text, "': unclosed ", quote, " quote");
  if (in_word) words.push_back(std::move(word));
  return words;
}

namespace {

struct Option {
  std::string key;
  std::vector<std::string> words;  // as given: "--key", or "--key=v", or "--key", "v"
};

std::vector<Option> options_of(const std::vector<std::string>& words) {
  std::vector<Option> out;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    Option o;
    o.words.push_back(w);
    if (w.rfind("--", 0) == 0 && w.size() > 2) {
      o.key = w.substr(2, w.find('=') == std::string::npos ? std::string::npos : w.find('=') - 2);
      if (w.find('=') == std::string::npos && i + 1 < words.size() &&
          words[i + 1].rfind("--", 0) != 0)
        o.words.push_back(words[++i]);
    }  // else a stray word: kept in place with no key, for Args to refuse
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

std::vector<std::string> merge_flags(const std::vector<std::string>& base,
                                     const std::vector<std::string>& over) {
  std::vector<Option> merged = options_of(base);
  for (Option& o : options_of(over)) {
    bool replaced = false;
    for (Option& m : merged) {
      if (!o.key.empty() && m.key == o.key) {
        m = o;
        replaced = true;
        break;
      }
    }
    if (!replaced) merged.push_back(std::move(o));
  }
  std::vector<std::string> words;
  for (const Option& o : merged) words.insert(words.end(), o.words.begin(), o.words.end());
  return words;
}

EngineFlags read_engine_flags(const std::vector<std::string>& words, const std::string& model_dir,
                              const char* what) {
  EngineFlags f;
  for (const std::string& w : words) {
    if (!f.text.empty()) f.text += ' ';
    f.text += w.find(' ') == std::string::npos ? w : "'" + w + "'";
  }
  const std::string command = std::string("eval ") + what;
  try {
    Args args(command, words);
    f.engine.model_dir = model_dir;
    read_chunk_flag(args, command.c_str(), &f.engine);
    read_stream_flags(args, &f.engine);
    const bool speculate = args.has("speculate") || args.has("draft");
    f.speculation = read_speculation_flags(args, command.c_str());
    if (!speculate) f.speculation.mode = Speculation::kOff;
    args.check_done();
  } catch (const base::Error& e) {
    // The shared readers name the flag but not where it came from: say which set it was in.
    const std::string message = e.what();
    if (message.rfind("deltafin ", 0) == 0) throw;
    base::fail("deltafin ", command, ": ", message);
  }
  return f;
}

}  // namespace deltafin::apps
