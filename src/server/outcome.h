// What one generation produced, in the order a client sees it: the unit that responses are
// formatted from (whole or streamed) and that the response memo stores.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deltafin/text.h"

namespace deltafin::server {

// The deltas are the text API's (deltafin/text.h); tool-call ids are "call_..." fresh per
// response.

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;     // prompt ids taken over from the kept conversation state
  int64_t reasoning_tokens = 0;  // completion ids spent in the thinking channel
};

struct Outcome {
  std::vector<Delta> deltas;
  std::string finish_reason;  // "stop", "length", "tool_calls"
  Usage usage;

  size_t bytes() const;  // what it occupies, for the memo's byte bound
};

}  // namespace deltafin::server
