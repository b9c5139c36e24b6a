// One tensor of a fixture's reference.safetensors (the oracles' logits and ids), widened to double,
// for the tests that compare against it.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/safetensors.h"

namespace deltafin::testing {

// F64, F32 or I32 values of tensor `name` in the safetensors file `path`. Throws
// std::runtime_error naming the file when the tensor is absent or of another dtype.
inline std::vector<double> read_reference_tensor(const std::string& path, const std::string& name) {
  for (const format::TensorInfo& t : format::read_safetensors_header(path)) {
    if (t.name != name) continue;
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(t.offset));
    std::vector<char> raw(t.nbytes);
    in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
    std::vector<double> out(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (t.dtype == format::DType::kF64) {
        std::memcpy(&out[i], raw.data() + 8 * i, 8);
      } else if (t.dtype == format::DType::kF32) {
        float v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        out[i] = v;
      } else if (t.dtype == format::DType::kI32) {
        int32_t v;
        std::memcpy(&v, raw.data() + 4 * i, 4);
        out[i] = v;
      } else {
        throw std::runtime_error("tensor " + name + " in " + path + " is not F64, F32 or I32");
      }
    }
    return out;
  }
  throw std::runtime_error("no tensor " + name + " in " + path);
}

}  // namespace deltafin::testing
