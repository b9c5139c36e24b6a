// Streaming safetensors writer: the header is fixed up front from the declared tensors, then their
// bytes arrive in declaration order in chunks of any size, so files far larger than RAM stream out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "format/dtype.h"

namespace deltafin::format {

// One tensor as declared to the writer; its data follows the previous tensor's without gaps.
struct TensorDecl {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;  // product of shape (1 for a scalar) times the element size
};

using SafetensorsMetadata = std::map<std::string, std::string>;

// The header the safetensors library writes for these tensors, as the bytes that follow the 8-byte
// length: compact JSON, "__metadata__" first (omitted when empty), then the tensors in data order
// with "dtype", "shape", "data_offsets", padded with spaces to a multiple of 8 bytes so the data
// section starts 8-aligned. Throws base::Error on an empty, repeated or reserved name.
std::string safetensors_header_json(const std::vector<TensorDecl>& tensors,
                                    const SafetensorsMetadata& metadata);

struct SafetensorsWriterOptions {
  // Bytes gathered before one write(2); larger appends bypass the buffer.
  size_t buffer_bytes = size_t{8} << 20;
  // For outputs larger than RAM: start write-back of each finished window and drop it from the
  // page cache once it is on disk, so writing never evicts other programs' memory and the rate
  // measured is the disk's, not the page cache's.
  bool drop_page_cache = false;
};

class SafetensorsWriter {
 public:
  // Creates (or truncates) `path` and writes the header. Throws base::Error naming the file.
  SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                    SafetensorsWriterOptions options = {},
                    SafetensorsMetadata metadata = {{"format", "pt"}});
  // Removes the file if finish() was not reached, so a failed run leaves no file that looks whole.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends the next bytes of the data section (they may span tensor boundaries). Throws if more
  // bytes arrive than the tensors declared.
  void write(std::span<const std::byte> bytes);
  void write(const void* data, size_t n_bytes) {
    write(std::span<const std::byte>(static_cast<const std::byte*>(data), n_bytes));
  }
  // Flushes and closes; throws unless exactly the declared number of bytes arrived.
  void finish();

  const std::string& path() const { return path_; }
  const std::vector<TensorDecl>& tensors() const { return tensors_; }
  uint64_t header_bytes() const { return data_start_; }  // 8 + JSON length, a multiple of 8
  // Absolute file offset of tensor i's first byte.
  uint64_t tensor_offset(size_t i) const { return data_start_ + begin_[i]; }
  uint64_t data_bytes() const { return data_total_; }
  uint64_t file_bytes() const { return data_start_ + data_total_; }

 private:
  void flush_buffer();
  void write_fully(const std::byte* data, size_t n_bytes);
  void write_behind();

  std::string path_;
  std::vector<TensorDecl> tensors_;
  std::vector<uint64_t> begin_;  // data-section offset of each tensor
  SafetensorsWriterOptions options_;
  int fd_ = -1;
  bool finished_ = false;
  uint64_t data_start_ = 0;
  uint64_t data_total_ = 0;
  uint64_t data_written_ = 0;
  uint64_t file_pos_ = 0;         // bytes handed to the kernel so far
  uint64_t writeback_start_ = 0;  // first byte whose write-back has not been started
  uint64_t dropped_until_ = 0;    // bytes already written back and dropped from the page cache
  std::vector<std::byte> buffer_;
  size_t buffered_ = 0;
};

// Writes a small file in one call, tensors in the given order. For tools and tests that hold the
// data in memory (for example `deltafin logits`).
struct TensorBytes {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // exactly the declared size
};
void write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                       const SafetensorsMetadata& metadata = {{"format", "pt"}});

}  // namespace deltafin::format
