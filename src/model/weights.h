// Spine weights by name → bytes. Blocks hold views (pointers + shapes) and never learn whether the
// bytes are mapped or streamed: resolution goes through WeightSource, and every tensor's shape and
// dtype is checked as it is resolved.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/weight_matrix.h"
#include "format/checkpoint.h"

namespace deltafin::model {

using kernels::WeightMatrix;

// Where spine tensors' bytes come from. The mapped source keeps every tensor addressable for its
// lifetime; a streaming source may make a layer's tensors addressable only while it runs.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const format::TensorInfo& info(std::string_view name) const = 0;  // throws if missing
  virtual const uint8_t* bytes(const format::TensorInfo& tensor) = 0;
};

class MappedWeightSource : public WeightSource {
 public:
  explicit MappedWeightSource(const format::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  const format::TensorInfo& info(std::string_view name) const override;
  const uint8_t* bytes(const format::TensorInfo& tensor) override;

 private:
  const format::Checkpoint& checkpoint_;
};

// Resolves named tensors into views and fp32 vectors, failing with the file, tensor, what was
// found and what was expected.
class WeightLoader {
 public:
  explicit WeightLoader(WeightSource& source) : source_(source) {}

  // A [rows, cols] matrix stored BF16 (or F32 where `allow_f32`).
  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols, bool allow_f32 = false);
  // n values stored F32 or BF16, any shape with n elements, widened to fp32.
  std::vector<float> vector(const std::string& name, int64_t n);
  // A per-head vector stored with padding: at least n_heads elements, the extra ones exactly 0.
  std::vector<float> per_head(const std::string& name, int64_t n_heads);

 private:
  std::vector<float> widen(const format::TensorInfo& t);

  WeightSource& source_;
};

}  // namespace deltafin::model
