// safetensors header parsing: the JSON pull reader builds the tensor table directly, then the
// range checks (bounds, size agreement, exact tiling of the data section).
#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "format/json_reader.h"
#include "format/name_table.h"

namespace deltafin::format {

using base::fail;

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

using detail::JsonReader;

struct RawEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

// Reads the header JSON into RawEntry records, refusing anything that is not the documented shape.
class HeaderReader {
 public:
  HeaderReader(std::string_view json, const std::string& path)
      : reader_(json, "file " + path + ": safetensors header"), path_(path) {}

  std::vector<RawEntry> read() {
    if (reader_.peek() != JsonReader::Type::kObject) {
      fail("file ", path_, ": safetensors header is ", JsonReader::type_name(reader_.peek()),
           ", expected a JSON object");
    }
    reader_.begin_object();
    std::string_view key;
    while (reader_.next_key(&key)) {
      if (key == "__metadata__") {
        read_metadata();
      } else {
        entries_.emplace_back();
        entries_.back().name = key;
        read_entry(entries_.back());
      }
    }
    reader_.expect_end();
    return std::move(entries_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail_entry(const RawEntry& e, Args&&... args) {
    fail("file ", path_, ": tensor ", e.name, ": ", std::forward<Args>(args)...);
  }

  // "__metadata__": null, or an object of strings (the reference reads it as map<string, string>).
  void read_metadata() {
    const JsonReader::Type type = reader_.peek();
    if (type == JsonReader::Type::kNull) return reader_.read_null();
    if (type != JsonReader::Type::kObject) {
      fail("file ", path_, ": __metadata__ is ", JsonReader::type_name(type),
           ", expected an object of strings");
    }
    reader_.begin_object();
    std::string_view key;
    while (reader_.next_key(&key)) {
      if (reader_.peek() != JsonReader::Type::kString) {
        fail("file ", path_, ": __metadata__ holds ", JsonReader::type_name(reader_.peek()),
             ", expected only string values");
      }
      reader_.read_string();
    }
  }

  void read_entry(RawEntry& e) {
    if (reader_.peek() != JsonReader::Type::kObject) {
      fail_entry(e, "entry is ", JsonReader::type_name(reader_.peek()),
                 ", expected an object with dtype, shape and data_offsets");
    }
    reader_.begin_object();
    bool seen[3] = {false, false, false};
    static constexpr const char* kFields[3] = {"dtype", "shape", "data_offsets"};
    std::string_view field;
    while (reader_.next_key(&field)) {
      int f = 0;
      while (f < 3 && field != kFields[f]) ++f;
      if (f == 3) {
        reader_.skip_value();  // fields the format may add later are ignored, as the reference does
        continue;
      }
      if (seen[f]) fail_entry(e, "field \"", kFields[f], "\" appears twice");
      seen[f] = true;
      if (f == 0) {
        read_dtype(e);
      } else if (f == 1) {
        read_uints(e, "shape", numbers_);
        e.shape.reserve(numbers_.size());
        for (uint64_t d : numbers_) {
          if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            fail_entry(e, "shape dimension ", d, " is too large");
          }
          e.shape.push_back(static_cast<int64_t>(d));
        }
      } else {
        read_uints(e, "data_offsets", numbers_);
        if (numbers_.size() != 2) {
          fail_entry(e, "data_offsets must hold exactly 2 numbers, got ", numbers_.size());
        }
        e.begin = numbers_[0];
        e.end = numbers_[1];
      }
    }
    for (int f = 0; f < 3; ++f) {
      if (!seen[f]) fail_entry(e, "field \"", kFields[f], "\" is missing");
    }
  }

  void read_dtype(RawEntry& e) {
    if (reader_.peek() != JsonReader::Type::kString) {
      fail_entry(e, "dtype is ", JsonReader::type_name(reader_.peek()), ", expected a string");
    }
    const std::string_view name = reader_.read_string();
    const auto dtype = dtype_from_name(name);
    if (!dtype) {
      fail_entry(e, "dtype \"", name,
                 "\" is not supported (expected BF16, F16, F32, F64, I8, U8, I32 or I64)");
    }
    e.dtype = *dtype;
  }

  void read_uints(const RawEntry& e, const char* what, std::vector<uint64_t>& out) {
    if (reader_.peek() != JsonReader::Type::kArray) {
      fail_entry(e, what, " is ", JsonReader::type_name(reader_.peek()), ", expected an array");
    }
    out.clear();
    reader_.begin_array();
    while (reader_.next_element()) {
      if (reader_.peek() != JsonReader::Type::kNumber) {
        fail_entry(e, what, " holds ", JsonReader::type_name(reader_.peek()),
                   ", expected non-negative integers");
      }
      const std::string_view token = reader_.read_number();
      uint64_t v = 0;
      if (!detail::json_number_to_u64(token, &v)) {
        fail_entry(e, what, " holds ", token, ", not a non-negative integer below 2^64");
      }
      out.push_back(v);
    }
  }

  JsonReader reader_;
  const std::string& path_;
  std::vector<RawEntry> entries_;
  std::vector<uint64_t> numbers_;  // scratch for shape and data_offsets
};

}  // namespace

namespace {

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Checks a header length against the limit and the file; shared by the file and memory paths.
void check_header_length(uint64_t header_bytes, uint64_t file_size, const std::string& path) {
  if (header_bytes > kMaxHeaderBytes) {
    fail("file ", path, ": safetensors header length ", header_bytes, " exceeds the limit of ",
         kMaxHeaderBytes, " bytes (not a safetensors file, or a damaged one)");
  }
  if (8 + header_bytes > file_size) {
    fail("file ", path, ": safetensors header length ", header_bytes,
         " runs past the end of the file (", file_size, " bytes; truncated?)");
  }
}

}  // namespace

std::vector<TensorInfo> parse_safetensors_header(std::string_view file_prefix, uint64_t file_size,
                                                 const std::string& path) {
  if (file_size < 8 || file_prefix.size() < 8) {
    fail("file ", path, ": ", file_size,
         " bytes is too short for a safetensors file (8-byte header length)");
  }
  const uint64_t header_bytes = read_le64(file_prefix.data());
  check_header_length(header_bytes, file_size, path);
  if (file_prefix.size() < 8 + header_bytes) {
    fail("file ", path, ": only ", file_prefix.size(), " bytes of the ", 8 + header_bytes,
         "-byte header were given");
  }
  const std::string_view json = file_prefix.substr(8, header_bytes);
  const uint64_t data_bytes = file_size - 8 - header_bytes;

  std::vector<RawEntry> raw = HeaderReader(json, path).read();

  // Names are unique: the reference parser keeps the last of two equal keys, so a duplicate means
  // two writers disagreed and nobody knows which range is meant.
  detail::NameTable names;
  const int64_t dup =
      names.build(raw.size(), [&](size_t i) -> std::string_view { return raw[i].name; });
  if (dup >= 0) {
    fail("file ", path, ": tensor ", raw[static_cast<size_t>(dup)].name,
         " appears twice in the header");
  }

  for (const RawEntry& e : raw) {
    const uint64_t begin = e.begin, end = e.end;
    if (begin > end) {
      fail("file ", path, ": tensor ", e.name, ": data_offsets [", begin, ", ", end,
           "] end before they begin");
    }
    if (end > data_bytes) {
      fail("file ", path, ": tensor ", e.name, ": data_offsets [", begin, ", ", end,
           "] run past the end of the data section (", data_bytes,
           " bytes; the file is truncated or the header is wrong)");
    }
    // Every partial product must fit in int64, so TensorInfo::numel() (and anything that multiplies
    // the dimensions in order) cannot overflow, even when a later dimension is 0.
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("file ", path, ": tensor ", e.name, ": shape ", shape_to_string(e.shape),
             " overflows");
      }
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, dtype_size(e.dtype), &nbytes) || nbytes != end - begin) {
      fail("file ", path, ": tensor ", e.name, ": ", dtype_name(e.dtype), " ",
           shape_to_string(e.shape), " needs ", numel, " x ", dtype_size(e.dtype),
           " bytes but data_offsets [", begin, ", ", end, "] hold ", end - begin);
    }
  }

  // Sorted by offset, the ranges must tile the data section: [0, e0) [e0, e1) ... [.., data_bytes).
  std::vector<uint32_t> by_offset(raw.size());
  std::iota(by_offset.begin(), by_offset.end(), 0u);
  std::sort(by_offset.begin(), by_offset.end(), [&](uint32_t a, uint32_t b) {
    if (raw[a].begin != raw[b].begin) return raw[a].begin < raw[b].begin;
    return raw[a].end != raw[b].end ? raw[a].end < raw[b].end : raw[a].name < raw[b].name;
  });
  uint64_t covered = 0;
  const RawEntry* previous = nullptr;
  for (uint32_t i : by_offset) {
    const RawEntry& e = raw[i];
    if (e.begin < covered) {
      fail("file ", path, ": tensor ", e.name, ": data_offsets [", e.begin, ", ", e.end,
           "] overlap tensor ", previous->name, " [", previous->begin, ", ", previous->end, "]");
    }
    if (e.begin > covered) {
      fail("file ", path, ": bytes [", covered, ", ", e.begin,
           ") of the data section belong to no tensor (gap before tensor ", e.name, ")");
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != data_bytes) {
    fail("file ", path, ": the tensors cover ", covered, " bytes of the ", data_bytes,
         "-byte data section; the rest belongs to no tensor");
  }

  const uint64_t data_start = 8 + header_bytes;
  std::vector<TensorInfo> out;
  out.reserve(raw.size());
  for (uint32_t i : by_offset) {
    RawEntry& e = raw[i];
    out.push_back(TensorInfo{std::move(e.name), e.dtype, std::move(e.shape), path,
                             data_start + e.begin, e.end - e.begin});
  }
  return out;
}

namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

void pread_all(int fd, char* dst, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("file ", path, ": read failed: ", std::strerror(errno));
    if (got == 0) fail("file ", path, ": unexpected end of file at byte ", offset);
    dst += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

}  // namespace

std::vector<TensorInfo> read_safetensors_header(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("file ", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("file ", path, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("file ", path, ": not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    fail("file ", path, ": ", file_size,
         " bytes is too short for a safetensors file (8-byte header length)");
  }
  std::string prefix(8, '\0');
  pread_all(fd.get(), prefix.data(), 8, 0, path);
  const uint64_t header_bytes = read_le64(prefix.data());
  check_header_length(header_bytes, file_size, path);
  prefix.resize(8 + header_bytes);
  pread_all(fd.get(), prefix.data() + 8, header_bytes, 8, path);
  return parse_safetensors_header(prefix, file_size, path);
}

}  // namespace deltafin::format
