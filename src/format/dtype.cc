// DType sizes and names, in the spelling of the safetensors header.
#include "format/dtype.h"

#include "base/error.h"

namespace deltafin::format {

namespace {
struct DTypeRow {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::kBF16, "BF16", 2}, {DType::kF16, "F16", 2}, {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kI32, "I32", 4},   {DType::kI64, "I64", 8},
};

const DTypeRow& row(DType dtype) {
  for (const DTypeRow& r : kDTypes) {
    if (r.dtype == dtype) return r;
  }
  DF_ASSERT(false && "DType value outside the enum");
  return kDTypes[0];
}
}  // namespace

size_t dtype_size(DType dtype) { return row(dtype).size; }

const char* dtype_name(DType dtype) { return row(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeRow& r : kDTypes) {
    if (name == r.name) return r.dtype;
  }
  return std::nullopt;
}

}  // namespace deltafin::format
