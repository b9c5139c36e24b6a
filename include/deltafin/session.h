// One sequence on a loaded engine: its state (attention caches, recurrent state, position) and
// ids, the forward pass over new ids, generation, and prefix sync for conversations that come
// back with their history. A session is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deltafin/generate.h"

namespace deltafin {

// Times and counts since the session was created (or last reset).
struct SessionStats {
  int64_t prefill_tokens = 0;  // ids run in multi-row passes
  double prefill_ms = 0.0;
  int64_t decode_tokens = 0;    // generated ids run by decode and verify passes (kept rows)
  double decode_ms = 0.0;       // those passes' time, rejected rows included
  int64_t decode_passes = 0;    // decode and verify passes: decode_tokens / this = ids per pass
  int64_t verify_passes = 0;    // of them, passes that verified drafted ids
  int64_t drafted_tokens = 0;   // drafted ids verified
  int64_t accepted_tokens = 0;  // of them, the ones equal to the model's own
  double draft_ms = 0.0;        // drafters' proposals (model drafters run forwards of their own)
};

class Session {
 public:
  virtual ~Session() = default;

  // Appends ids to the sequence and runs them through the model (prefill in chunks). Returns the
  // logits of every new position, [ids.size(), vocab] row-major, when all_rows; else the last
  // position's [vocab]. Throws std::runtime_error (deltafin's Error) for an id outside the vocab
  // or beyond the context, running nothing; after any other failure the session is empty.
  virtual std::vector<float> forward(std::span<const int32_t> ids, bool all_rows = false) = 0;

  // Runs `prompt` (may be empty to continue from the current state, which then needs logits from
  // an earlier call), then generates per `options`, calling `on_token` for each new id.
  virtual GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                  const TokenCallback& on_token = {}) = 0;

  // Prefix sync: keeps the sequence when its ids are a non-empty prefix of `ids` (or all of them),
  // else starts over. Returns how many of `ids` the sequence already holds, so that
  // generate(ids.subspan(n)) gives exactly what generate(ids) gives on an empty session while
  // running only the new suffix.
  virtual int64_t sync(std::span<const int32_t> ids) = 0;
  // The sequence's ids: every id run, then the last generated id when it is not run yet.
  virtual const std::vector<int32_t>& ids() const = 0;
  virtual int64_t position() const = 0;  // ids().size()
  virtual void reset() = 0;              // back to an empty sequence
  virtual const SessionStats& stats() const = 0;
};

}  // namespace deltafin
