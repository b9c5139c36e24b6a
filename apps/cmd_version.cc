// `deltafin --version`: the version, the CPU features and the kernel variant selected at run time.
#include <cstdio>

#include "base/cpu_features.h"
#include "command.h"
#include "deltafin/version.h"

namespace deltafin::apps {
namespace {

int run_version(Args& args) {
  args.check_done();
  std::printf("deltafin %s\n", kVersion);
  std::printf("cpu: %s\n", base::cpu_summary().c_str());
  std::printf("kernels: %s\n", base::isa_name(base::selected_isa()));
  return 0;
}

}  // namespace

DELTAFIN_COMMAND(version, "version", "print the version and the CPU kernels selected", run_version);

}  // namespace deltafin::apps
