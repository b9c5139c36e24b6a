// The one reader of typed fields in parsed JSON (config.json, OpenAI request bodies): every error
// names the full field path (`text_config.hidden_size`, `messages[2].content`) and what was
// expected, in the user's terms, never the JSON library's exception text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"

namespace deltafin::base {

// Ordered, so that a request's key order survives into what is rendered from it.
using Json = nlohmann::ordered_json;

// What was wrong, for callers that map it onto their own error kinds (an HTTP error code).
enum class FieldProblem {
  kSyntax,       // the text is not JSON
  kMissing,      // a required field is absent or null
  kWrongType,    // a string where an integer belongs, ...
  kOutOfRange,   // the right type, outside the allowed range
  kInvalid,      // any other value the caller refuses
  kUnknown,      // a key the caller does not read
  kUnsupported,  // a key the caller knows but cannot honour
};

// what(): "<context>: field <path>: <detail>", the context and the path when there are any.
class FieldError : public Error {
 public:
  FieldError(const std::string& context, std::string path, FieldProblem problem,
             std::string detail);
  const std::string& path() const { return path_; }  // "" for the whole document
  FieldProblem problem() const { return problem_; }
  const std::string& detail() const { return detail_; }  // "expected a string, got 3"

 private:
  std::string path_;
  FieldProblem problem_;
  std::string detail_;
};

struct JsonReadOptions {
  std::string context;  // prefixed to every message: the file ("m/config.json"), or empty
  // 16.0 reads as the integer 16 (JSON's number model, as OpenAI clients send it); off, an
  // integer field takes integer literals only.
  bool integral_floats = false;
};

// Parses `text`; a syntax error (or a number past double's range) is a kSyntax FieldError
// "<context>: invalid JSON: <where and why>".
Json parse_json(std::string_view text, const JsonReadOptions& options);

// A value shortened for a message: its JSON text, at most 60 characters.
std::string describe_json(const Json& value);

class JsonObject;

// One value and its path; each typed read checks the type (and range) or throws FieldError.
class JsonField {
 public:
  JsonField(const Json& value, std::string path, JsonReadOptions options)
      : value_(&value), path_(std::move(path)), options_(std::move(options)) {}

  const Json& json() const { return *value_; }
  const std::string& path() const { return path_; }
  const JsonReadOptions& options() const { return options_; }

  bool boolean() const;
  const std::string& string() const;
  int64_t integer(int64_t min, int64_t max) const;
  double number() const;  // any (finite) number
  double number(double min, double max) const;
  JsonObject object() const;
  // The array's length, after checking that it is one; element(i) is `path[i]`.
  size_t array_size() const;
  JsonField element(size_t i) const;

  template <typename... Args>
  [[noreturn]] void fail(FieldProblem problem, Args&&... detail) const {
    throw FieldError(options_.context, path_, problem, str_cat(std::forward<Args>(detail)...));
  }

 private:
  const Json* value_;
  std::string path_;
  JsonReadOptions options_;
};

// The fields of one object, read by key. A null field reads as absent (JSON's way of saying
// "the default"). Unknown-key policy: finish() refuses any key that was not read; a caller that
// tolerates unknown keys (config.json's future knobs) does not call it.
class JsonObject {
 public:
  // Throws FieldError (kWrongType) when `value` is not an object.
  explicit JsonObject(const JsonField& value);

  const std::string& path() const { return path_; }
  std::string path(std::string_view key) const;  // "a.b", or "b" at the top level
  std::vector<std::string> keys() const;         // in document order

  bool has(const std::string& key) const;                      // present and not null
  std::optional<JsonField> get(const std::string& key) const;  // optional; marks the key read
  JsonField at(const std::string& key) const;                  // required: kMissing if absent

  bool boolean(const std::string& key) const { return at(key).boolean(); }
  bool boolean_or(const std::string& key, bool fallback) const;
  std::string string(const std::string& key) const { return at(key).string(); }
  int64_t integer(const std::string& key, int64_t min, int64_t max) const {
    return at(key).integer(min, max);
  }
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  double number(const std::string& key) const { return at(key).number(); }
  JsonObject object(const std::string& key) const;

  // Refuses the first key not read: kUnsupported with its explanation when `unsupported` names
  // it, kUnknown otherwise.
  void finish(const std::map<std::string, std::string>& unsupported = {}) const;

  template <typename... Args>
  [[noreturn]] void fail(const std::string& key, FieldProblem problem, Args&&... detail) const {
    throw FieldError(options_.context, path(key), problem, str_cat(std::forward<Args>(detail)...));
  }

 private:
  const Json* object_;
  std::string path_;
  JsonReadOptions options_;
  mutable std::set<std::string, std::less<>> read_;  // the keys taken so far, for finish()
};

}  // namespace deltafin::base
