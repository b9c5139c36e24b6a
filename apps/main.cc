// Entry point of the `deltafin` command: dispatches to the registered subcommands and turns user
// errors into one clear message and exit status 1.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/timeline.h"
#include "command.h"
#include "deltafin/version.h"

namespace {

void print_usage() {
  std::fprintf(stderr, "deltafin %s: exact inference for MoE models larger than memory\n\n",
               deltafin::kVersion);
  std::fprintf(stderr, "usage: deltafin COMMAND [options]\n\ncommands:\n");
  for (const auto& [name, cmd] : deltafin::apps::commands()) {
    std::fprintf(stderr, "  %-16s %s\n", name.c_str(), cmd.summary);
  }
  std::fprintf(stderr, "\n  deltafin --version   version and the CPU kernels selected\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  if (name == "--version") name = "version";
  const auto& table = deltafin::apps::commands();
  auto it = table.find(name);
  if (it == table.end()) {
    std::fprintf(stderr, "deltafin: unknown command '%s' (see deltafin --help)\n", name.c_str());
    return 2;
  }
  try {
    deltafin::apps::Args args(name, std::vector<std::string>(argv + 2, argv + argc));
    const int status = it->second.run(args);
    deltafin::base::timeline::finish();  // --trace-timeline: written once the command is done
    return status;
  } catch (const deltafin::base::Error& e) {
    std::fprintf(stderr, "deltafin: error: %s\n", e.what());
    try {
      deltafin::base::timeline::finish();  // what was recorded up to the error still helps
    } catch (const deltafin::base::Error&) {
    }
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deltafin: unexpected error: %s\n", e.what());
    return 1;
  }
}
