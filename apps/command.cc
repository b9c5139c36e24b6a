// Argument parsing and the command table.
#include "command.h"

#include <cstdlib>

#include "base/error.h"

namespace deltafin::apps {

using base::fail;

Args::Args(std::string command, std::vector<std::string> argv) : command_(std::move(command)) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      positional_.push_back(a);
      continue;
    }
    std::string key = a.substr(2), value;
    bool has_value = false;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      has_value = true;
    } else if (i + 1 < argv.size() && (argv[i + 1].rfind("--", 0) != 0 ||
                                       argv[i + 1].find_first_of(" \t") != std::string::npos)) {
      // An argument holding a space is a value even when it starts with "--" (no option name
      // has one): `eval --variant '--experts stream'` passes a set of flags as one value.
      value = argv[++i];
      has_value = true;
    }
    if (values_.count(key)) fail("deltafin ", command_, ": option --", key, " given twice");
    values_[key] = has_value ? value : std::string("\x01");  // \x01 marks a bare flag
    used_[key] = false;
  }
}

bool Args::has(const std::string& name) const { return values_.count(name) != 0; }

std::string Args::get(const std::string& name, const std::string& fallback) {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  used_[name] = true;
  if (it->second == "\x01") fail("deltafin ", command_, ": option --", name, " needs a value");
  return it->second;
}

std::string Args::required(const std::string& name) {
  if (!has(name)) fail("deltafin ", command_, ": missing required option --", name);
  return get(name);
}

bool Args::flag(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) return false;
  used_[name] = true;
  if (it->second != "\x01") {
    fail("deltafin ", command_, ": option --", name, " takes no value (got '", it->second, "')");
  }
  return true;
}

long long Args::get_int(const std::string& name, long long fallback) {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0')
    fail("deltafin ", command_, ": --", name, " expects an integer, got '", v, "'");
  return n;
}

double Args::get_double(const std::string& name, double fallback) {
  if (!has(name)) return fallback;
  const std::string v = get(name);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0')
    fail("deltafin ", command_, ": --", name, " expects a number, got '", v, "'");
  return d;
}

std::string Args::take_positional() {
  if (positional_.empty()) return "";
  std::string first = positional_.front();
  positional_.erase(positional_.begin());
  return first;
}

void Args::check_done() const {
  for (const auto& [key, used] : used_) {
    if (!used) fail("deltafin ", command_, ": unknown option --", key);
  }
  if (!positional_.empty())
    fail("deltafin ", command_, ": unexpected argument '", positional_[0], "'");
}

namespace {
std::map<std::string, Command>& table() {
  static std::map<std::string, Command> t;
  return t;
}
}  // namespace

bool register_command(const Command& command) {
  table()[command.name] = command;
  return true;
}

const std::map<std::string, Command>& commands() { return table(); }

}  // namespace deltafin::apps
