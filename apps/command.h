// Subcommand registry for the `deltafin` binary, plus the small argument parser they share.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace deltafin::apps {

// Parsed `--key value` / `--flag` arguments. Unknown or missing options are user errors.
class Args {
 public:
  Args(std::string command, std::vector<std::string> argv);

  // Declares that --name takes a value / is a bare flag; call before reading. Unknown options
  // left over at check_done() are reported with the command's name.
  std::string get(const std::string& name, const std::string& fallback = "");
  std::string required(const std::string& name);
  bool has(const std::string& name) const;
  bool flag(const std::string& name);
  long long get_int(const std::string& name, long long fallback);
  double get_double(const std::string& name, double fallback);
  const std::vector<std::string>& positional() const { return positional_; }
  // Removes and returns the first positional argument ("" when there is none): for commands
  // with a verb, like `bench decode`.
  std::string take_positional();
  // Throws if an option was given that no get/flag call asked about.
  void check_done() const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> used_;
  std::vector<std::string> positional_;
};

using CommandFn = int (*)(Args& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

// Registers at static-initialization time; returns true so it can initialize a variable.
bool register_command(const Command& command);
const std::map<std::string, Command>& commands();

}  // namespace deltafin::apps

#define DELTAFIN_COMMAND(ident, name, summary, fn) \
  static const bool ident##_registered = ::deltafin::apps::register_command({name, summary, fn})
