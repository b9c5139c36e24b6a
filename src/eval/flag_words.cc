// Splitting and merging flag words.
#include "eval/flag_words.h"

#include "base/error.h"

namespace deltafin::eval {

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

}  // namespace deltafin::eval
