// Options and results of text generation through the public API (token ids in, token ids out).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace deltafin {

struct GenerateOptions {
  int max_new_tokens = 256;
  bool stop_at_eos = true;        // stop after the model's end-of-sequence id
  std::vector<int32_t> stop_ids;  // further ids that end generation (included in the output)
  // Sampling: temperature 0 is greedy (argmax, lowest id on ties). Otherwise softmax at this
  // temperature restricted by top_k (0 = all) and top_p (1 = all), drawn with `seed`.
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  // Polled between prefill chunks (a long prompt runs in many); returning true ends generate()
  // there with StopReason::kCancelled and no new ids. The ids already run stay in the session
  // (position() counts them). Per generated id, the TokenCallback is the way to stop.
  std::function<bool()> cancel;
  // Also poll `cancel` between the layers of each prompt pass, so that a long prompt's prefill
  // stops within about one layer's time, not one pass's (`deltafin run`'s Ctrl-C). A cancel seen
  // mid-pass leaves the session empty (reset: position() 0), since a part-run pass leaves no
  // state an id list describes. Outputs are the same bit for bit when nothing is cancelled.
  bool cancel_between_layers = false;
};

// kContextFull: the session holds max_context_tokens positions and cannot run another id (the
// last generated id is returned, not run).
enum class StopReason { kEos, kStopId, kMaxTokens, kCallback, kCancelled, kContextFull };

struct GenerateResult {
  std::vector<int32_t> ids;  // generated ids, prompt excluded
  StopReason stop = StopReason::kMaxTokens;
};

// Called once per generated id, in order; return false to stop after it.
using TokenCallback = std::function<bool(int32_t id)>;

}  // namespace deltafin
