// Mapped weight source and the loader that binds by role, checked against the schema.
#include "model/weights.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "format/safetensors.h"
#include "format/spine_int8.h"
#include "quant/bf16.h"

namespace deltafin::model {
namespace {

std::string describe(const format::TensorInfo& t) {
  return base::str_cat("file ", t.file, ": tensor ", t.name, " (", format::dtype_name(t.dtype), " ",
                       format::shape_to_string(t.shape), ")");
}

}  // namespace

const format::TensorInfo& MappedWeightSource::info(std::string_view name) const {
  return checkpoint_.get(name);
}

const uint8_t* MappedWeightSource::bytes(const format::TensorInfo& tensor) {
  return checkpoint_.map(tensor).data();
}

bool WeightLoader::has(format::Role role) const {
  for (const format::ExpectedTensor& t : tensors_) {
    if (t.role == role) return true;
  }
  return false;
}

const format::ExpectedTensor& WeightLoader::expected(format::Role role) const {
  for (const format::ExpectedTensor& t : tensors_) {
    if (t.role == role) return t;
  }
  base::fail("the tensor schema lists no tensor of role ", static_cast<int>(role),
             " for this block (the family's table and its block choices disagree)");
}

const format::TensorInfo& WeightLoader::checked(const format::ExpectedTensor& want) {
  const format::TensorInfo& t = source_.info(want.name);
  if (!format::shape_matches(want, t.shape)) {
    if (want.shape_rule == format::ShapeRule::kPerHeadVector)
      base::fail(describe(t), ": expected a vector of at least ", want.shape[0],
                 " per-head values");
    base::fail(describe(t), ": expected shape ", format::shape_to_string(want.shape));
  }
  // An int8 spine tensor (an overlay's, format/spine_int8.h) stands for a 2-D BF16 one.
  const bool int8 =
      t.dtype == format::DType::kI8 && want.shape.size() == 2 &&
      std::find(want.dtypes.begin(), want.dtypes.end(), format::DType::kBF16) != want.dtypes.end();
  if (!int8 && std::find(want.dtypes.begin(), want.dtypes.end(), t.dtype) == want.dtypes.end())
    base::fail(describe(t), ": expected dtype ", format::dtypes_to_string(want.dtypes));
  return t;
}

WeightMatrix WeightLoader::matrix(format::Role role) {
  const format::ExpectedTensor& want = expected(role);
  DF_ASSERT(want.shape.size() == 2);
  const format::TensorInfo& t = checked(want);
  WeightMatrix w;
  if (t.dtype == format::DType::kI8) {
    const format::TensorInfo& s = source_.info(t.name + format::kInt8ScaleSuffix);
    if (s.dtype != format::DType::kF32 || s.shape != std::vector<int64_t>{want.shape[0]})
      base::fail(describe(s), ": expected the int8 row scales of ", t.name, ", F32 [",
                 want.shape[0], "]");
    w.dtype = kernels::WeightDType::kInt8;
    w.data = source_.bytes(t);
    w.scales = source_.bytes(s);
    w.rows = want.shape[0];
    w.cols = want.shape[1];
    return w;
  }
  DF_ASSERT(t.dtype == format::DType::kBF16 || t.dtype == format::DType::kF32);
  w.dtype =
      t.dtype == format::DType::kF32 ? kernels::WeightDType::kF32 : kernels::WeightDType::kBF16;
  w.data = source_.bytes(t);
  w.rows = want.shape[0];
  w.cols = want.shape[1];
  return w;
}

std::vector<float> WeightLoader::widen(const format::TensorInfo& t) {
  const uint8_t* p = source_.bytes(t);
  const int64_t n = t.numel();
  std::vector<float> out(n);
  if (t.dtype == format::DType::kF32) {
    std::memcpy(out.data(), p, n * sizeof(float));
  } else if (t.dtype == format::DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      out[i] = quant::bf16_to_f32(b);
    }
  } else {
    base::fail(describe(t), ": expected dtype F32 or BF16");
  }
  return out;
}

std::vector<float> WeightLoader::vector(format::Role role) {
  return widen(checked(expected(role)));
}

std::vector<float> WeightLoader::per_head(format::Role role) {
  const format::ExpectedTensor& want = expected(role);
  DF_ASSERT(want.shape_rule == format::ShapeRule::kPerHeadVector);
  const format::TensorInfo& t = checked(want);
  const int64_t n_heads = want.shape[0];
  std::vector<float> v = widen(t);
  for (int64_t i = n_heads; i < static_cast<int64_t>(v.size()); ++i) {
    if (v[i] != 0.0f)
      base::fail(describe(t), ": element ", i, " is ", v[i], "; the padding past the ", n_heads,
                 " heads must be 0");
  }
  v.resize(n_heads);
  return v;
}

}  // namespace deltafin::model
