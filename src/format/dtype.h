// Element types a safetensors file may hold that deltafin reads, with their sizes and names.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace deltafin::format {

// The safetensors dtypes deltafin accepts. Others (BOOL, F8_*, U16, ...) are refused by name.
enum class DType { kBF16, kF16, kF32, kF64, kI8, kU8, kI32, kI64 };

size_t dtype_size(DType dtype);       // bytes per element
const char* dtype_name(DType dtype);  // the safetensors spelling: "BF16", "U8", ...
std::optional<DType> dtype_from_name(std::string_view name);  // nullopt for any other spelling

}  // namespace deltafin::format
