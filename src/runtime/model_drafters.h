// The model drafters an engine loads from MODEL/drafters/ (format/drafter_dirs.h), behind the
// session seam (session_drafter.h): DSpark for chat, fed the target's taps of every committed
// row; Qwen3 for raw text, which reads the committed ids as text through its own tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <vector>

#include "deltafin/engine.h"
#include "format/config.h"
#include "format/drafter_dirs.h"
#include "model/model.h"
#include "runtime/memory_plan.h"
#include "runtime/session_drafter.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::runtime {

// DSpark drafts while the sequence holds fewer positions than this (spec drafting.md §4: the
// context its training and Deltafin's ledger stop at); beyond it n-gram lookup takes over.
inline constexpr int64_t kDSparkMaxContext = 8192;

// The Qwen3 drafter reads at most this many of the sequence's last ids as its context (its own
// KV cache is fp32, 229 KB a position at 0.6B), and holds at most kQwenMaxPositions of its own.
inline constexpr int64_t kQwenContextIds = 768;
inline constexpr int64_t kQwenMaxPositions = 1024;

// The share of a pass's disk reads each drafter is expected to save per generated id, before it
// has run (the memory plan's prior; the controller measures the real acceptance per request):
// 1 - (a verify pass's cost in 1-row passes) / (ids per pass).
// - DSpark: 3.3 ids per pass (Inferact/Kimi-K3-DSpark-Block5's aggregate over nine benchmarks,
//   the nearest published K3 figure) and a 4-row pass at about 1.3 one-row passes here
//   (docs/PERFORMANCE.md): 1 - 1.3 / 3.3 = 0.6.
// - Qwen3: Deltafin's one published Qwen hybrid figure is 2.68x on a raw completion; we assume
//   less (2 ids per pass at 1.2 passes), 0.4, since it was one prompt.
inline constexpr double kDSparkExpectedSaving = 0.6;
inline constexpr double kQwenExpectedSaving = 0.4;

// A drafter folder the memory plan weighs.
struct DrafterCandidate {
  format::DrafterDir dir;
  DrafterCost cost;
};

// The drafters of `model_dir` that `load` asks for, with their bytes: DSpark (K3 targets only)
// and the first Qwen3 folder found (0.6B before 1.7B; the target needs a tokenizer to translate).
// A drafter asked for by name that the folder lacks is a base::Error saying how to install it.
std::vector<DrafterCandidate> drafter_candidates(const std::string& model_dir,
                                                 const format::ModelConfig& target,
                                                 DrafterLoad load);

// DIR (config.json + model.safetensors) drafting for `target`, whose embedding and lm_head it
// borrows (the target must outlive it). Throws base::Error naming what does not fit.
std::unique_ptr<DrafterModel> load_dspark_drafter(const std::string& dir,
                                                  const model::Model& target);
// The memory one DSpark session's context cache takes at kDSparkMaxContext positions.
uint64_t dspark_context_bytes(const std::string& dir);

// DIR (a Qwen3 folder: config.json, model.safetensors, tokenizer.json) drafting for a target whose
// tokenizer (load_tokenizer of its folder) turns Qwen's text back into the target's ids. Throws
// base::Error naming the file that is missing or does not fit.
std::unique_ptr<DrafterModel> load_qwen_drafter(
    const std::string& dir, std::shared_ptr<const tokenizer::Tokenizer> target_tokenizer);
// The memory one Qwen session's KV cache takes at kQwenMaxPositions positions.
uint64_t qwen_context_bytes(const std::string& dir);

}  // namespace deltafin::runtime
