// Spine weights by name → bytes. Blocks hold views (pointers + shapes) and never learn whether the
// bytes are mapped or streamed: resolution goes through WeightSource, and every tensor's shape and
// dtype is checked as it is resolved.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/checkpoint.h"
#include "format/schema.h"
#include "kernels/weight_matrix.h"

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

// Binds one block's tensors by role: names, shapes and dtypes come from the family's schema
// (format/schema.h), and every tensor is checked as it is resolved, failing with the file, tensor,
// what was found and what was expected.
class WeightLoader {
 public:
  WeightLoader(WeightSource& source, std::vector<format::ExpectedTensor> tensors)
      : source_(source), tensors_(std::move(tensors)) {}

  // Whether the schema lists the role for this config (an optional part such as shared experts).
  bool has(format::Role role) const;
  // A [rows, cols] matrix in a dtype the schema accepts (BF16, or F32 where it allows).
  WeightMatrix matrix(format::Role role);
  // A tensor of the schema's shape, stored F32 or BF16, widened to fp32 (row-major).
  std::vector<float> vector(format::Role role);
  // A per-head vector stored with padding: at least shape[0] = n_heads elements, the extra ones
  // exactly 0; returns the n_heads values.
  std::vector<float> per_head(format::Role role);

 private:
  const format::ExpectedTensor& expected(format::Role role) const;
  // The tensor, its shape and dtype checked against the schema's.
  const format::TensorInfo& checked(const format::ExpectedTensor& want);
  std::vector<float> widen(const format::TensorInfo& t);

  WeightSource& source_;
  std::vector<format::ExpectedTensor> tensors_;
};

}  // namespace deltafin::model
