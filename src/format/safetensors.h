// safetensors headers: the 8-byte length, the JSON table of tensors, and every check that keeps a
// damaged or hostile file from turning into wrong offsets later.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/dtype.h"

namespace deltafin::format {

// The largest JSON header accepted, as in the reference implementation (huggingface/safetensors
// MAX_HEADER_SIZE). K3's shards have headers of about 1 MB.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Where one tensor's bytes are: enough to map it or read it with one request.
struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string file;  // path of the shard file
  uint64_t offset;   // absolute byte offset of the data in the file (8 + header_len + begin)
  uint64_t nbytes;
  int64_t numel() const;
};

// Reads a safetensors file's header with pread (never the data) and validates it as
// parse_safetensors_header does. Throws base::Error naming the file (and the tensor).
std::vector<TensorInfo> read_safetensors_header(const std::string& path);

// Validates and parses a header held in memory. `file_prefix` starts at byte 0 of the file and
// holds at least the 8-byte length and the JSON header; `file_size` is the size of the whole file.
// Rules (the reference implementation's, plus duplicate names which it silently merges):
//  - header length <= kMaxHeaderBytes and 8 + length <= file_size;
//  - the header is one JSON object; "__metadata__" (optional) maps strings to strings; every other
//    key is a tensor {"dtype": known dtype, "shape": [non-negative ints], "data_offsets": [b, e]};
//    other fields of an entry are ignored; names are unique;
//  - b <= e, e <= the data section's size, e - b == numel(shape) * dtype_size (no overflow);
//  - sorted by offset, the ranges tile the data section exactly: no overlap, no gap, no trailing
//    bytes. The reference implementation refuses gaps and trailing bytes too, so every file HF
//    tools load passes, and a gap is a sign of a damaged or hand-edited file.
// Tensors come back in offset order.
std::vector<TensorInfo> parse_safetensors_header(std::string_view file_prefix, uint64_t file_size,
                                                 const std::string& path_for_errors);

// "[3072, 1792]"
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace deltafin::format
