// safetensors header parsing: a streaming JSON reader that builds the tensor table directly, then
// the range checks (bounds, size agreement, exact tiling of the data section).
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
#include "format/json_sax.h"

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

using detail::Json;

struct RawEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  std::vector<uint64_t> offsets;  // [begin, end] relative to the data section
};

// Streams the header JSON into RawEntry records, refusing anything that is not the documented
// shape. Relies on the JSON grammar: inside an object, every event after a key is that key's value.
class HeaderSax {
 public:
  explicit HeaderSax(const std::string& path) : path_(path) {}
  std::vector<RawEntry>& entries() { return entries_; }

  bool null() { return scalar("null"); }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(Json::number_integer_t v) {
    if (skipping(0)) return true;
    if (state_ == State::kShape || state_ == State::kOffsets) {
      fail_entry(field_name(), " holds the negative number ", v);
    }
    return scalar("a number");
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    if (skipping(0)) return true;
    if (state_ == State::kShape) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail_entry("shape dimension ", v, " is too large");
      }
      entry_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::kOffsets) {
      if (entry_.offsets.size() == 2) fail_entry("data_offsets must hold exactly 2 numbers");
      entry_.offsets.push_back(v);
      return true;
    }
    return scalar("a number");
  }
  bool number_float(Json::number_float_t, const std::string& text) {
    if (skipping(0)) return true;
    if (state_ == State::kShape || state_ == State::kOffsets) {
      fail_entry(field_name(), " holds ", text, ", not a non-negative integer below 2^64");
    }
    return scalar("a number");
  }
  bool string(std::string& s) {
    if (skipping(0)) return true;
    if (state_ == State::kMetadata) return true;
    if (state_ == State::kEntry && field_ == Field::kDtype) {
      auto dtype = dtype_from_name(s);
      if (!dtype) {
        fail_entry("dtype \"", s,
                   "\" is not supported (expected BF16, F16, F32, F64, I8, U8, I32 or I64)");
      }
      entry_.dtype = *dtype;
      return true;
    }
    return scalar("a string");
  }
  bool binary(Json::binary_t&) { return scalar("binary data"); }

  bool start_object(std::size_t) {
    if (skipping(+1)) return true;
    switch (state_) {
      case State::kStart:
        state_ = State::kTable;
        return true;
      case State::kTable:
        if (in_metadata_key_) {
          state_ = State::kMetadata;
        } else {
          state_ = State::kEntry;
          field_ = Field::kNone;
        }
        return true;
      default:
        return scalar("an object");
    }
  }
  bool end_object() {
    if (skipping(-1)) return true;
    switch (state_) {
      case State::kTable:
        state_ = State::kDone;
        return true;
      case State::kMetadata:
        state_ = State::kTable;
        return true;
      case State::kEntry:
        finish_entry();
        state_ = State::kTable;
        return true;
      default:
        DF_ASSERT(false && "JSON grammar: end_object outside an object");
        return false;
    }
  }
  bool start_array(std::size_t) {
    if (skipping(+1)) return true;
    if (state_ == State::kEntry && field_ == Field::kShape) {
      state_ = State::kShape;
      return true;
    }
    if (state_ == State::kEntry && field_ == Field::kOffsets) {
      state_ = State::kOffsets;
      return true;
    }
    return scalar("an array");
  }
  bool end_array() {
    if (skipping(-1)) return true;
    if (state_ == State::kOffsets && entry_.offsets.size() != 2) {
      fail_entry("data_offsets must hold exactly 2 numbers, got ", entry_.offsets.size());
    }
    DF_ASSERT(state_ == State::kShape || state_ == State::kOffsets);
    state_ = State::kEntry;
    return true;
  }
  bool key(std::string& k) {
    if (skip_.active()) return true;  // keys do not change the depth of a skipped value
    if (state_ == State::kTable) {
      in_metadata_key_ = k == "__metadata__";
      if (!in_metadata_key_) {
        entry_ = RawEntry{};
        entry_.name = std::move(k);
        seen_ = 0;
      }
      return true;
    }
    if (state_ == State::kEntry) {
      if (k == "dtype") {
        field_ = Field::kDtype;
      } else if (k == "shape") {
        field_ = Field::kShape;
      } else if (k == "data_offsets") {
        field_ = Field::kOffsets;
      } else {
        field_ = Field::kNone;
        skip_.begin();  // fields the format may add later are ignored, as the reference does
        return true;
      }
      const unsigned bit = 1u << static_cast<unsigned>(field_);
      if (seen_ & bit) fail_entry("field \"", k, "\" appears twice");
      seen_ |= bit;
      return true;
    }
    return true;  // keys of __metadata__
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    detail::fail_json(base::str_cat("file ", path_, ": safetensors header"), e);
  }

 private:
  enum class State { kStart, kTable, kMetadata, kEntry, kShape, kOffsets, kDone };
  enum class Field : unsigned { kNone = 0, kDtype = 1, kShape = 2, kOffsets = 3 };

  // Feeds the event to the skipper when an ignored value is being consumed.
  bool skipping(int depth_change) {
    if (!skip_.active()) return false;
    skip_.consume(depth_change);
    return true;
  }

  const char* field_name() const {
    return state_ == State::kShape ? "shape" : state_ == State::kOffsets ? "data_offsets" : "value";
  }

  template <typename... Args>
  [[noreturn]] void fail_entry(Args&&... args) {
    fail("file ", path_, ": tensor ", entry_.name, ": ", std::forward<Args>(args)...);
  }

  // A scalar or container where the format has no place for it.
  bool scalar(const char* kind) {
    if (skipping(0)) return true;
    switch (state_) {
      case State::kStart:
        fail("file ", path_, ": safetensors header is ", kind, ", expected a JSON object");
      case State::kTable:
        if (in_metadata_key_) {
          if (std::strcmp(kind, "null") == 0) return true;  // "__metadata__": null is allowed
          fail("file ", path_, ": __metadata__ is ", kind, ", expected an object of strings");
        }
        fail_entry("entry is ", kind, ", expected an object with dtype, shape and data_offsets");
      case State::kMetadata:
        fail("file ", path_, ": __metadata__ holds ", kind, ", expected only string values");
      case State::kEntry:
        fail_entry(field_ == Field::kDtype   ? "dtype"
                   : field_ == Field::kShape ? "shape"
                                             : "data_offsets",
                   " is ", kind,
                   field_ == Field::kDtype ? ", expected a string" : ", expected an array");
      case State::kShape:
      case State::kOffsets:
        fail_entry(field_name(), " holds ", kind, ", expected non-negative integers");
      case State::kDone:
        break;
    }
    DF_ASSERT(false && "JSON grammar: value after the end of the document");
    return false;
  }

  void finish_entry() {
    static constexpr const char* kNames[] = {"", "dtype", "shape", "data_offsets"};
    for (unsigned f = 1; f <= 3; ++f) {
      if (!(seen_ & (1u << f))) fail_entry("field \"", kNames[f], "\" is missing");
    }
    entries_.push_back(std::move(entry_));
  }

  const std::string& path_;
  State state_ = State::kStart;
  Field field_ = Field::kNone;
  bool in_metadata_key_ = false;
  unsigned seen_ = 0;
  RawEntry entry_;
  detail::ValueSkipper skip_;
  std::vector<RawEntry> entries_;
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

  HeaderSax sax(path);
  nlohmann::json::sax_parse(json.begin(), json.end(), &sax);
  std::vector<RawEntry>& raw = sax.entries();

  // Names are unique: the reference parser keeps the last of two equal keys, so a duplicate means
  // two writers disagreed and nobody knows which range is meant.
  std::vector<uint32_t> by_name(raw.size());
  std::iota(by_name.begin(), by_name.end(), 0u);
  std::sort(by_name.begin(), by_name.end(),
            [&](uint32_t a, uint32_t b) { return raw[a].name < raw[b].name; });
  for (size_t i = 1; i < by_name.size(); ++i) {
    if (raw[by_name[i]].name == raw[by_name[i - 1]].name) {
      fail("file ", path, ": tensor ", raw[by_name[i]].name, " appears twice in the header");
    }
  }

  for (const RawEntry& e : raw) {
    const uint64_t begin = e.offsets[0], end = e.offsets[1];
    if (begin > end) {
      fail("file ", path, ": tensor ", e.name, ": data_offsets [", begin, ", ", end,
           "] end before they begin");
    }
    if (end > data_bytes) {
      fail("file ", path, ": tensor ", e.name, ": data_offsets [", begin, ", ", end,
           "] run past the end of the data section (", data_bytes,
           " bytes; the file is truncated or the header is wrong)");
    }
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
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
    return raw[a].offsets != raw[b].offsets ? raw[a].offsets < raw[b].offsets
                                            : raw[a].name < raw[b].name;
  });
  uint64_t covered = 0;
  const RawEntry* previous = nullptr;
  for (uint32_t i : by_offset) {
    const RawEntry& e = raw[i];
    if (e.offsets[0] < covered) {
      fail("file ", path, ": tensor ", e.name, ": data_offsets [", e.offsets[0], ", ", e.offsets[1],
           "] overlap tensor ", previous->name, " [", previous->offsets[0], ", ",
           previous->offsets[1], "]");
    }
    if (e.offsets[0] > covered) {
      fail("file ", path, ": bytes [", covered, ", ", e.offsets[0],
           ") of the data section belong to no tensor (gap before tensor ", e.name, ")");
    }
    covered = e.offsets[1];
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
                             data_start + e.offsets[0], e.offsets[1] - e.offsets[0]});
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
