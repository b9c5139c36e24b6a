// Drafter traces through the public API: run the target model greedily over a prompt and, step
// by step, a model drafter (DSpark) against it, reporting what it proposed and what the target
// would have accepted. For checking a drafter from outside the test suite (`deltafin draft`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin {

struct DraftTraceOptions {
  std::string model_dir;    // the target (K3) folder
  std::string drafter_dir;  // the DSpark folder (config.json + model.safetensors)
  std::vector<int32_t> prompt_ids;
  int steps = 1;
  bool keep_logits = false;  // fill DraftTrace::logits / logits_markov
};

struct DraftTraceStep {
  int64_t context_length = 0;      // L: target positions in the drafter's context cache
  int32_t anchor = 0;              // the pending target token at position L
  std::vector<int32_t> draft_ids;  // the block's drafts (7)
  std::vector<float> confidence;   // per draft, in [0, 1]
  int accepted = 0;  // the longest prefix of drafts equal to the target's greedy continuation
  int64_t new_context_length = 0;  // L + accepted + 1: the anchor and the accepted rows join it
};

struct DraftTrace {
  int64_t vocab_size = 0;
  int rows_per_step = 0;            // drafts per step (7)
  std::vector<int32_t> target_ids;  // the target's greedy continuation, as far as the trace read
  std::vector<DraftTraceStep> steps;
  // keep_logits: [steps, rows_per_step, vocab] draft logits without and with the Markov bias.
  std::vector<float> logits, logits_markov;
};

// Loads both folders (throws std::runtime_error, deltafin's Error, naming what does not fit) and
// runs the trace: the prompt through the target with taps, its rows into the drafter's context;
// then per step a proposal at the anchor, acceptance against the target's greedy continuation,
// and the anchor's and accepted rows' taps appended.
DraftTrace run_draft_trace(const DraftTraceOptions& options);

}  // namespace deltafin
