// Options and results of text generation through the public API (token ids in, token ids out).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace deltafin {

// Speculative decoding (docs/SPECULATION.md): a drafter proposes the next ids and one verify pass
// of the model checks several of them at once. Every id is still the model's own: the output is
// the same with speculation on or off, for greedy and seeded sampling alike; only speed changes.
enum class Speculation {
  // The best drafter there is for the text, when it pays: DSpark for chat requests and Qwen3 for
  // raw completions where the model folder holds them (docs/SPECULATION.md), n-gram lookup else.
  kAuto,
  kOff,     // one id per pass
  kNgram,   // prompt lookup: ids that followed the latest earlier occurrence of the last few ids
  kDspark,  // the DSpark block drafter (chat or not), reading the model's hidden states
  kQwen,    // a Qwen3 model drafting text, translated into the model's ids
  // The ids of SpeculationOptions::script, the continuation known in advance (a plain run's):
  // measures the engine with acceptance full, or cut where the script differs (bench verify).
  kScript,
};

struct SpeculationOptions {
  Speculation mode = Speculation::kAuto;
  int draft_max = 7;  // drafted ids in one verify pass at most (the pass holds one more row)
  // > 0: every pass verifies at least this many drafted ids (padding the drafter's proposal with
  // the last id), whatever the controller would choose: for measuring the engine and for tests
  // that must exercise verification on every step.
  int draft_min = 0;
  // kScript: the generated ids expected, from the first; the drafts after the g-th generated id
  // are script[g], script[g + 1], ...
  std::vector<int32_t> script;
  // The request was rendered with the chat format: kAuto drafts it with DSpark (trained on chat);
  // raw text goes to the Qwen3 drafter.
  bool chat = false;
};

// After each pass that generated ids: what it verified and what it kept (stats, benchmarks).
struct PassReport {
  int rows = 0;               // rows the pass ran: the pending id and the drafted ids
  int drafted = 0;            // rows - 1
  int accepted = 0;           // drafted ids that equalled the model's own
  double ms = 0.0;            // the pass's wall time
  const char* decision = "";  // why the controller chose this width
  const char* drafter = "";   // who proposed the drafts ("" for a plain pass)
  double draft_ms = 0.0;      // the proposal's wall time (before the pass)
};

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
  SpeculationOptions speculation;
  std::function<void(const PassReport&)> on_pass;  // called after each decode or verify pass
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
