// `deltafin bench verify`: the cost of a verify pass by width (bench_verify.cc).
#pragma once

#include "command.h"

namespace deltafin::apps {

int run_bench_verify(Args& args);

}  // namespace deltafin::apps
