// The tensor roster a config implies (every name, shape, accepted dtypes and role), the routed
// experts' contiguous spans, and the check of a checkpoint against both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/checkpoint.h"
#include "format/config.h"
#include "format/dtype.h"

namespace deltafin::format {

enum class TensorRole {
  kSpine,         // dense weights: embeddings, attention, norms, router, shared experts, lm_head
  kRoutedExpert,  // one of a routed expert's tensors, read per token from disk
};

enum class ShapeRule {
  kExact,
  // A per-head vector that may carry padding: at most one dimension differs from 1 and the element
  // count is at least shape[0] (K3's A_log is F32 [128] for 96 heads, the tail zero).
  kPerHeadVector,
};

struct ExpectedTensor {
  std::string name;  // full name, prefix included
  std::vector<int64_t> shape;
  std::vector<DType> dtypes;  // accepted dtypes, preferred first
  TensorRole role = TensorRole::kSpine;
  int64_t layer = -1;   // -1 for the global tensors
  int64_t expert = -1;  // routed experts only
  ShapeRule shape_rule = ShapeRule::kExact;
};

// Every tensor the architecture needs, globals first, then layer by layer (spine tensors, then the
// routed experts in id order, each expert's tensors in file order).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);
bool shape_matches(const ExpectedTensor& expected, const std::vector<int64_t>& shape);

// "language_model.model.layers.5.block_sparse_moe.experts.17."
std::string expert_prefix(const ModelConfig& config, int64_t layer, int64_t expert);
// The suffixes of one routed expert's tensors in their required file order:
// MXFP4 w1.weight_packed, w1.weight_scale, w2.weight_packed, w2.weight_scale, w3.weight_packed,
// w3.weight_scale; BF16 w1.weight, w2.weight, w3.weight.
const std::vector<std::string>& expert_tensor_suffixes(const ModelConfig& config);
// Bytes of one routed expert's tensors together (17,547,264 for K3).
uint64_t expert_span_bytes(const ModelConfig& config);

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
