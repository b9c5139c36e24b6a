// Engine flags as data, for `deltafin eval`: the exact path's (--engine-flags) and a variant's
// (--variant) are each one string of the flags run and generate take, parsed by the same readers
// (stream_flags.h, speculation_flags.h), so that any engine option, lossy ones to come included,
// is a variant without a change here.
#pragma once

#include <string>
#include <vector>

#include "deltafin/engine.h"
#include "deltafin/generate.h"

namespace deltafin::apps {

struct EngineFlags {
  std::string text;  // as shown in reports: the words joined by spaces, "" for the defaults
  EngineOptions engine;
  // Greedy continuations run with speculation off unless the flags ask for it (its ids are the
  // same either way, docs/SPECULATION.md, which makes it an exact variant worth checking).
  SpeculationOptions speculation;
};

// Reads `words` as run and generate read their engine flags: --chunk, the streaming flags
// (--memory-budget, --experts, --spine, --prefill-group, ...) and the speculation flags. `what`
// names the source in errors ("--variant"). Unknown options are refused.
EngineFlags read_engine_flags(const std::vector<std::string>& words, const std::string& model_dir,
                              const char* what);

}  // namespace deltafin::apps
