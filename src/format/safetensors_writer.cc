// Streaming safetensors writer: header from declarations, data in order, byte counts enforced.
#include "format/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "base/error.h"

namespace deltafin::format {
namespace {

// Write-back window for drop_page_cache: large enough to keep the disk queue full, small enough
// that at most two windows of dirty pages exist at a time.
constexpr uint64_t kWritebackWindowBytes = uint64_t{64} << 20;

uint64_t checked_nbytes(const TensorDecl& t) {
  uint64_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape) {
    if (d < 0) base::fail("tensor ", t.name, " has a negative dimension");
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d)) {
      base::fail("tensor ", t.name, " is too large");
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

uint64_t TensorDecl::nbytes() const { return checked_nbytes(*this); }

std::string safetensors_header_json(const std::vector<TensorDecl>& tensors,
                                    const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorDecl& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      base::fail("safetensors: invalid tensor name '", t.name, "'");
    }
    if (!seen.insert(t.name).second) base::fail("safetensors: tensor ", t.name, " declared twice");
    const uint64_t n = checked_nbytes(t);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = dtype_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + n};
    header[t.name] = std::move(entry);
    offset += n;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  return json;
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                                     SafetensorsWriterOptions options, SafetensorsMetadata metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)), options_(options) {
  const std::string json = safetensors_header_json(tensors_, metadata);
  begin_.reserve(tensors_.size());
  for (const TensorDecl& t : tensors_) {
    begin_.push_back(data_total_);
    data_total_ += t.nbytes();
  }
  data_start_ = 8 + json.size();
  options_.buffer_bytes = std::max<size_t>(options_.buffer_bytes, 4096);
  buffer_.resize(options_.buffer_bytes);

  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) base::fail("cannot create ", path_, ": ", std::strerror(errno));
  std::byte length[8];
  const uint64_t json_bytes = json.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::byte>((json_bytes >> (8 * i)) & 0xff);
  write_fully(length, 8);
  write_fully(reinterpret_cast<const std::byte*>(json.data()), json.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(path_.c_str());
}

void SafetensorsWriter::write(std::span<const std::byte> bytes) {
  if (finished_) base::fail(path_, ": write after finish");
  if (bytes.size() > data_total_ - data_written_) {
    base::fail(path_, ": ", data_written_ + bytes.size(), " data bytes written but the tensors ",
               "declare ", data_total_);
  }
  data_written_ += bytes.size();
  if (buffered_ == 0 && bytes.size() >= buffer_.size()) {
    write_fully(bytes.data(), bytes.size());
    return;
  }
  while (!bytes.empty()) {
    const size_t n = std::min(bytes.size(), buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes.data(), n);
    buffered_ += n;
    bytes = bytes.subspan(n);
    if (buffered_ == buffer_.size()) flush_buffer();
  }
}

void SafetensorsWriter::finish() {
  if (finished_) return;
  flush_buffer();
  if (data_written_ != data_total_) {
    base::fail(path_, ": only ", data_written_, " of ", data_total_, " data bytes were written");
  }
  if (options_.drop_page_cache && file_pos_ > dropped_until_) {
    ::sync_file_range(
        fd_, static_cast<off_t>(dropped_until_), static_cast<off_t>(file_pos_ - dropped_until_),
        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    ::posix_fadvise(fd_, static_cast<off_t>(dropped_until_),
                    static_cast<off_t>(file_pos_ - dropped_until_), POSIX_FADV_DONTNEED);
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) base::fail("cannot close ", path_, ": ", std::strerror(errno));
  finished_ = true;
}

void SafetensorsWriter::flush_buffer() {
  if (buffered_ == 0) return;
  write_fully(buffer_.data(), buffered_);
  buffered_ = 0;
}

void SafetensorsWriter::write_fully(const std::byte* data, size_t n_bytes) {
  while (n_bytes > 0) {
    const ssize_t n = ::write(fd_, data, std::min<size_t>(n_bytes, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      base::fail("cannot write ", path_, ": ", std::strerror(errno));
    }
    data += n;
    n_bytes -= static_cast<size_t>(n);
    file_pos_ += static_cast<uint64_t>(n);
  }
  if (options_.drop_page_cache) write_behind();
}

// Classic write-behind: start write-back of the window just filled, then wait for the window
// before it and drop it from the page cache. The disk always has one window in flight.
void SafetensorsWriter::write_behind() {
  while (file_pos_ - writeback_start_ >= kWritebackWindowBytes) {
    ::sync_file_range(fd_, static_cast<off_t>(writeback_start_),
                      static_cast<off_t>(kWritebackWindowBytes), SYNC_FILE_RANGE_WRITE);
    if (writeback_start_ > dropped_until_) {
      const uint64_t length = writeback_start_ - dropped_until_;
      ::sync_file_range(
          fd_, static_cast<off_t>(dropped_until_), static_cast<off_t>(length),
          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      ::posix_fadvise(fd_, static_cast<off_t>(dropped_until_), static_cast<off_t>(length),
                      POSIX_FADV_DONTNEED);
      dropped_until_ = writeback_start_;
    }
    writeback_start_ += kWritebackWindowBytes;
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                       const SafetensorsMetadata& metadata) {
  std::vector<TensorDecl> decls;
  decls.reserve(tensors.size());
  for (const TensorBytes& t : tensors) decls.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter writer(path, decls, {}, metadata);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].data.size() != decls[i].nbytes()) {
      base::fail(path, ": tensor ", tensors[i].name, " has ", tensors[i].data.size(),
                 " bytes of data, its dtype and shape need ", decls[i].nbytes());
    }
    writer.write(tensors[i].data);
  }
  writer.finish();
}

}  // namespace deltafin::format
