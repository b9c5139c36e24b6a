// DirectFile: a read-only file opened for O_DIRECT (falling back to buffered reads followed by
// POSIX_FADV_DONTNEED where the filesystem refuses O_DIRECT, e.g. tmpfs), and the alignment
// arithmetic that turns an arbitrary byte span into one aligned request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace deltafin::io {

// Offsets, lengths and buffer addresses of O_DIRECT requests are multiples of this. 4096 covers
// every logical block size in use (512 and 4096).
inline constexpr size_t kDirectAlignment = 4096;

enum class ReadMode {
  kDirect,    // O_DIRECT: bypasses the page cache
  kBuffered,  // page cache, with POSIX_FADV_DONTNEED after each read so experts never pile up
};
const char* read_mode_name(ReadMode mode);

// O_DIRECT probes (one real aligned read) made so far by DirectFile::open in this process; a
// filesystem is probed until one probe there succeeds, then opens there skip it. For tests.
uint64_t direct_probe_count();

class DirectFile {
 public:
  DirectFile() = default;
  // Opens `path` read-only. kDirect unless the filesystem refuses O_DIRECT (or allow_direct is
  // false), then kBuffered. Throws base::Error naming the path when the file cannot be opened.
  static DirectFile open(const std::string& path, bool allow_direct = true);
  // Takes ownership of a descriptor the caller opened, read buffered whatever it is. Tests use it
  // with a pipe to keep a read in flight for as long as they need.
  static DirectFile adopt(int fd, std::string name);
  ~DirectFile();
  DirectFile(DirectFile&& other) noexcept;
  DirectFile& operator=(DirectFile&& other) noexcept;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size_bytes() const { return size_bytes_; }
  ReadMode mode() const { return mode_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t size_bytes_ = 0;
  ReadMode mode_ = ReadMode::kDirect;
};

// The aligned request that covers [offset, offset + length): read `read_length` bytes at
// `read_offset`; the wanted bytes then start `data_offset` bytes into the buffer. Near the end of
// a file the request may extend past EOF; only `data_offset + length` bytes must arrive.
struct AlignedSpan {
  uint64_t read_offset = 0;
  size_t read_length = 0;
  size_t data_offset = 0;
  size_t required_bytes = 0;  // data_offset + length
};
AlignedSpan align_span(uint64_t offset, size_t length, size_t alignment = kDirectAlignment);

// Synchronous read of [offset, offset + length) through the enclosing aligned range into `buf`
// (kDirectAlignment-aligned, at least align_span(offset, length).read_length bytes). Returns
// where the wanted bytes start inside `buf`. Throws base::Error naming the file and offset on an
// I/O error or when the file ends before the span does.
size_t read_span(const DirectFile& file, uint64_t offset, size_t length, void* buf,
                 size_t buf_capacity);

// Evicts a file's pages from the page cache (POSIX_FADV_DONTNEED; needs no root). Dirty pages
// are flushed first. Throws base::Error when the file cannot be opened.
void drop_page_cache(const std::string& path);

}  // namespace deltafin::io
