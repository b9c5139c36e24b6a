// Mapped weight source and the checked loader.
#include "model/weights.h"

#include <cstring>

#include "base/error.h"
#include "format/safetensors.h"
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

WeightMatrix WeightLoader::matrix(const std::string& name, int64_t rows, int64_t cols,
                                  bool allow_f32) {
  const format::TensorInfo& t = source_.info(name);
  if (t.shape != std::vector<int64_t>{rows, cols})
    base::fail(describe(t), ": expected shape ", format::shape_to_string({rows, cols}));
  if (t.dtype != format::DType::kBF16 && !(allow_f32 && t.dtype == format::DType::kF32))
    base::fail(describe(t), ": expected dtype BF16", allow_f32 ? " or F32" : "");
  WeightMatrix w;
  w.dtype =
      t.dtype == format::DType::kF32 ? kernels::WeightDType::kF32 : kernels::WeightDType::kBF16;
  w.data = source_.bytes(t);
  w.rows = rows;
  w.cols = cols;
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

std::vector<float> WeightLoader::vector(const std::string& name, int64_t n) {
  const format::TensorInfo& t = source_.info(name);
  if (t.numel() != n) base::fail(describe(t), ": expected ", n, " elements");
  return widen(t);
}

std::vector<float> WeightLoader::per_head(const std::string& name, int64_t n_heads) {
  const format::TensorInfo& t = source_.info(name);
  int64_t wide = 0;
  for (int64_t d : t.shape) wide += d != 1;
  if (wide > 1 || t.numel() < n_heads)
    base::fail(describe(t), ": expected a vector of at least ", n_heads, " per-head values");
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
