// The speculation flags that run, generate, serve and bench decode share (--speculate,
// --draft-max, --draft-min), and the summary line --stats prints from a session's counters.
#pragma once

#include <string>

#include "command.h"
#include "deltafin/engine.h"
#include "deltafin/generate.h"
#include "deltafin/session.h"

namespace deltafin::apps {

// --speculate auto|off|ngram|dspark|qwen (or the same as --draft), --draft-max N (0..16),
// --draft-min N (0..16, at most --draft-max unless --draft-max is absent); a bad value is a user
// error naming `command`.
SpeculationOptions read_speculation_flags(Args& args, const char* command);
// The model drafters an engine loads for these settings: the plan's choice for auto, none for
// off and ngram (they never ask for one), the named one for dspark and qwen.
DrafterLoad drafters_for(const SpeculationOptions& options);
// "auto", "off", "ngram", "dspark", "qwen" or "script".
const char* speculation_name(Speculation mode);
// "speculation: ..." with drafted, accepted, passes and ids per pass; empty when nothing was
// drafted and speculation was off.
std::string describe_speculation(const SessionStats& stats, const SpeculationOptions& options);

}  // namespace deltafin::apps
