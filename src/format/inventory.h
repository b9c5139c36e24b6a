// The check of a checkpoint against its family's schema (format/schema.h): every tensor present
// with its shape and dtype, and the routed experts' contiguous spans.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "format/config.h"
#include "format/dtype.h"
#include "format/schema.h"

namespace deltafin::format {

// One routed expert's tensors, back to back in one file: what one read fetches.
struct ExpertSpan {
  int64_t layer, expert;
  std::string file;
  uint64_t offset, nbytes;
};
// Locates every routed expert (by layer, then expert id) and checks its tensors are present with
// the expected shape and dtype and stored back to back in file order; throws base::Error naming
// the expert otherwise.
std::vector<ExpertSpan> locate_experts(const Checkpoint& checkpoint, const ModelConfig& config);

struct InventoryProblem {
  std::string message;  // names the file and tensor, what was found and what was expected
};

struct InventoryReport {
  std::vector<InventoryProblem> problems;  // empty when the checkpoint is complete and consistent
  std::vector<ExpertSpan> experts;         // every expert found whole and contiguous
  std::vector<uint64_t> spine_bytes_by_layer;
  uint64_t global_spine_bytes = 0;  // embeddings, final norms, lm_head
  std::vector<int64_t> experts_by_layer;
  uint64_t expert_bytes = 0;
  std::vector<const TensorInfo*> unused;  // tensors no block reads (e.g. K3's vision tower)
  uint64_t unused_bytes = 0;
};
// Checks presence, shape and dtype of every expected tensor and the contiguity of every routed
// expert, and totals the bytes.
InventoryReport inspect_inventory(const Checkpoint& checkpoint, const ModelConfig& config);
std::vector<InventoryProblem> check_inventory(const Checkpoint& checkpoint,
                                              const ModelConfig& config);

}  // namespace deltafin::format
