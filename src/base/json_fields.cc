// The typed JSON field reader: type and range checks, and messages that name the field path.
#include "base/json_fields.h"

#include <cmath>

namespace deltafin::base {
namespace {

std::string message(const std::string& context, const std::string& path,
                    const std::string& detail) {
  std::string out;
  if (!context.empty()) out += context + ": ";
  if (!path.empty()) out += "field " + path + ": ";
  return out + detail;
}

// The library's text after its "[json.exception.parse_error.101] " tag: the position and reason.
std::string without_tag(const char* what) {
  std::string_view s(what);
  if (!s.empty() && s.front() == '[') {
    const size_t end = s.find("] ");
    if (end != std::string_view::npos) s.remove_prefix(end + 2);
  }
  return std::string(s);
}

}  // namespace

FieldError::FieldError(const std::string& context, std::string path, FieldProblem problem,
                       std::string detail)
    : Error(message(context, path, detail)),
      path_(std::move(path)),
      problem_(problem),
      detail_(std::move(detail)) {}

Json parse_json(std::string_view text, const JsonReadOptions& options) {
  // The library takes a NUL byte for the end of its input, so "{}\0anything" would parse as "{}".
  // JSON text never holds a raw NUL (not even in a string, where it must be escaped).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    throw FieldError(options.context, "", FieldProblem::kSyntax,
                     str_cat("invalid JSON: a raw NUL byte at byte ", nul, " of ", text.size()));
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw FieldError(options.context, "", FieldProblem::kSyntax,
                     str_cat("invalid JSON: ", without_tag(e.what())));
  }
}

std::string describe_json(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

bool JsonField::boolean() const {
  if (!value_->is_boolean())
    fail(FieldProblem::kWrongType, "expected true or false, got ", describe_json(*value_));
  return value_->get<bool>();
}

const std::string& JsonField::string() const {
  if (!value_->is_string())
    fail(FieldProblem::kWrongType, "expected a string, got ", describe_json(*value_));
  return value_->get_ref<const std::string&>();
}

int64_t JsonField::integer(int64_t min, int64_t max) const {
  const Json& v = *value_;
  const auto refuse = [&](FieldProblem problem) {
    fail(problem, "expected an integer in [", min, ", ", max, "], got ", describe_json(v));
  };
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (max < 0 || u > static_cast<uint64_t>(max)) refuse(FieldProblem::kOutOfRange);
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (options_.integral_floats && v.is_number_float() && std::isfinite(v.get<double>()) &&
             v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 1e15) {
    x = static_cast<int64_t>(v.get<double>());
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
             v.get<double>() == std::floor(v.get<double>()) &&
             std::fabs(v.get<double>()) >= 9223372036854775808.0) {
    // An integer literal past 64 bits, which the library holds as a float: the user wrote an
    // integer, so the problem is its size, not its type.
    fail(FieldProblem::kOutOfRange, "out of range: ", describe_json(v),
         " is beyond 64-bit integers; expected an integer in [", min, ", ", max, "]");
  } else {
    refuse(FieldProblem::kWrongType);
  }
  if (x < min || x > max) refuse(FieldProblem::kOutOfRange);
  return x;
}

double JsonField::number() const {
  if (!value_->is_number() || !std::isfinite(value_->get<double>()))
    fail(FieldProblem::kWrongType, "expected a number, got ", describe_json(*value_));
  return value_->get<double>();
}

double JsonField::number(double min, double max) const {
  const auto refuse = [&](FieldProblem problem) {
    fail(problem, "expected a number in [", min, ", ", max, "], got ", describe_json(*value_));
  };
  if (!value_->is_number()) refuse(FieldProblem::kWrongType);
  const double x = value_->get<double>();
  if (!(x >= min && x <= max)) refuse(FieldProblem::kOutOfRange);
  return x;
}

JsonObject JsonField::object() const { return JsonObject(*this); }

size_t JsonField::array_size() const {
  if (!value_->is_array())
    fail(FieldProblem::kWrongType, "expected an array, got ", describe_json(*value_));
  return value_->size();
}

JsonField JsonField::element(size_t i) const {
  return JsonField((*value_)[i], str_cat(path_, "[", i, "]"), options_);
}

JsonObject::JsonObject(const JsonField& value)
    : object_(&value.json()), path_(value.path()), options_(value.options()) {
  if (!object_->is_object())
    value.fail(FieldProblem::kWrongType, "expected an object, got ", describe_json(*object_));
}

std::string JsonObject::path(std::string_view key) const {
  return path_.empty() ? std::string(key) : str_cat(path_, ".", key);
}

std::vector<std::string> JsonObject::keys() const {
  std::vector<std::string> out;
  for (auto it = object_->begin(); it != object_->end(); ++it) out.push_back(it.key());
  return out;
}

bool JsonObject::has(const std::string& key) const {
  auto it = object_->find(key);
  return it != object_->end() && !it->is_null();
}

std::optional<JsonField> JsonObject::get(const std::string& key) const {
  read_.insert(key);
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return std::nullopt;
  return JsonField(*it, path(key), options_);
}

JsonField JsonObject::at(const std::string& key) const {
  std::optional<JsonField> v = get(key);
  if (!v) fail(key, FieldProblem::kMissing, "missing");
  return *v;
}

bool JsonObject::boolean_or(const std::string& key, bool fallback) const {
  const std::optional<JsonField> v = get(key);
  return v ? v->boolean() : fallback;
}

int64_t JsonObject::integer_or(const std::string& key, int64_t fallback, int64_t min,
                               int64_t max) const {
  const std::optional<JsonField> v = get(key);
  return v ? v->integer(min, max) : fallback;
}

JsonObject JsonObject::object(const std::string& key) const { return at(key).object(); }

void JsonObject::finish(const std::map<std::string, std::string>& unsupported) const {
  for (auto it = object_->begin(); it != object_->end(); ++it) {
    if (read_.count(it.key()) || it->is_null()) continue;  // null: the default, honoured
    const auto u = unsupported.find(it.key());
    if (u != unsupported.end()) fail(it.key(), FieldProblem::kUnsupported, u->second);
    fail(it.key(), FieldProblem::kUnknown, "unknown field");
  }
}

}  // namespace deltafin::base
