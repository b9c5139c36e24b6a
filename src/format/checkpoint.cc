// Checkpoint folders: the shard index (streamed, it has ~500k entries for K3), the headers of every
// shard, their cross-checks, and lazily mapped shards for resident weights.
#include "format/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "base/error.h"
#include "format/json_sax.h"

namespace deltafin::format {

using base::fail;

namespace {

using detail::Json;

// Streams {"metadata": ..., "weight_map": {name: shard, ...}, ...}; keys other than weight_map are
// skipped whatever their shape.
class IndexSax {
 public:
  IndexSax(const std::string& path, ShardIndex& out) : path_(path), out_(out) {}
  bool saw_weight_map() const { return saw_weight_map_; }

  bool null() { return value("null"); }
  bool boolean(bool) { return value("a boolean"); }
  bool number_integer(Json::number_integer_t) { return value("a number"); }
  bool number_unsigned(Json::number_unsigned_t) { return value("a number"); }
  bool number_float(Json::number_float_t, const std::string&) { return value("a number"); }
  bool binary(Json::binary_t&) { return value("binary data"); }
  bool string(std::string& shard) {
    if (skipping(0)) return true;
    if (state_ != State::kMap) return value("a string");
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.find('\0') != std::string::npos) {
      fail(path_, ": weight_map[\"", name_, "\"] = \"", shard,
           "\" is not a plain file name in the model folder");
    }
    auto [it, inserted] = shard_ids_.try_emplace(shard, static_cast<uint32_t>(shard_ids_.size()));
    if (inserted) out_.shards.push_back(shard);
    if (!out_.weight_map.try_emplace(std::move(name_), it->second).second) {
      fail(path_, ": weight_map lists tensor ", name_, " twice");
    }
    return true;
  }
  bool start_object(std::size_t) {
    if (skipping(+1)) return true;
    if (state_ == State::kStart) {
      state_ = State::kTop;
      return true;
    }
    if (state_ == State::kTop && in_weight_map_key_) {
      if (saw_weight_map_) fail(path_, ": weight_map appears twice");
      saw_weight_map_ = true;
      state_ = State::kMap;
      return true;
    }
    return value("an object");
  }
  bool end_object() {
    if (skipping(-1)) return true;
    state_ = state_ == State::kMap ? State::kTop : State::kDone;
    return true;
  }
  bool start_array(std::size_t) {
    if (skipping(+1)) return true;
    return value("an array");
  }
  bool end_array() {
    skipping(-1);  // arrays only ever occur inside skipped values
    return true;
  }
  bool key(std::string& k) {
    if (skip_.active()) return true;
    if (state_ == State::kTop) {
      in_weight_map_key_ = k == "weight_map";
      if (!in_weight_map_key_) skip_.begin();
    } else {
      name_ = std::move(k);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    detail::fail_json(path_, e);
  }

 private:
  enum class State { kStart, kTop, kMap, kDone };

  bool skipping(int depth_change) {
    if (!skip_.active()) return false;
    skip_.consume(depth_change);
    return true;
  }
  bool value(const char* kind) {
    if (skipping(0)) return true;
    if (state_ == State::kStart) fail(path_, ": the index is ", kind, ", expected a JSON object");
    if (state_ == State::kTop) fail(path_, ": weight_map is ", kind, ", expected an object");
    fail(path_, ": weight_map[\"", name_, "\"] is ", kind, ", expected a shard file name");
  }

  const std::string& path_;
  ShardIndex& out_;
  State state_ = State::kStart;
  bool in_weight_map_key_ = false;
  bool saw_weight_map_ = false;
  std::string name_;
  std::unordered_map<std::string, uint32_t> shard_ids_;
  detail::ValueSkipper skip_;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("file ", path, ": cannot open: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("file ", path, ": read failed");
  return std::move(text).str();
}

}  // namespace

ShardIndex parse_shard_index(std::string_view json_text, const std::string& path) {
  ShardIndex index;
  IndexSax sax(path, index);
  nlohmann::json::sax_parse(json_text.begin(), json_text.end(), &sax);
  if (!sax.saw_weight_map()) fail(path, ": no weight_map object");
  // Shard ids follow file-name order so that tensors() comes out in a stable, sorted order.
  std::vector<uint32_t> order(index.shards.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return index.shards[a] < index.shards[b]; });
  std::vector<uint32_t> new_id(order.size());
  std::vector<std::string> sorted(order.size());
  for (uint32_t i = 0; i < order.size(); ++i) {
    new_id[order[i]] = i;
    sorted[i] = std::move(index.shards[order[i]]);
  }
  index.shards = std::move(sorted);
  for (auto& [name, shard] : index.weight_map) shard = new_id[shard];
  return index;
}

struct Checkpoint::Impl {
  struct Mapping {
    std::once_flag once;
    const uint8_t* base = nullptr;
    uint64_t size_bytes = 0;
  };

  std::string dir;
  std::vector<Shard> shards;
  std::vector<TensorInfo> tensors;
  // Keys view the names inside `tensors`, which is never modified after open().
  std::unordered_map<std::string_view, uint32_t> by_name;
  std::vector<std::unique_ptr<Mapping>> mappings;  // one per shard

  ~Impl() {
    for (auto& m : mappings) {
      if (m->base) ::munmap(const_cast<uint8_t*>(m->base), m->size_bytes);
    }
  }
};

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

const std::string& Checkpoint::dir() const { return impl_->dir; }
const std::vector<Checkpoint::Shard>& Checkpoint::shards() const { return impl_->shards; }
const std::vector<TensorInfo>& Checkpoint::tensors() const { return impl_->tensors; }

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("checkpoint ", impl_->dir, ": missing tensor ", name);
  return *t;
}

Checkpoint Checkpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  const std::string index_path = (fs::path(dir) / kIndexFileName).string();
  const std::string single_path = (fs::path(dir) / kSingleFileName).string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("checkpoint ", dir, ": not a directory");

  ShardIndex index;
  const bool indexed = fs::exists(index_path, ec);
  if (indexed) {
    index = parse_shard_index(read_text_file(index_path), index_path);
  } else if (fs::exists(single_path, ec)) {
    index.shards.push_back(kSingleFileName);
  } else {
    fail("checkpoint ", dir, ": neither ", kIndexFileName, " nor ", kSingleFileName, " is there");
  }

  for (const std::string& shard : index.shards) {
    const std::string path = (fs::path(dir) / shard).string();
    if (!fs::exists(path, ec)) {
      fail("checkpoint ", dir, ": ", kIndexFileName, " names shard ", shard,
           ", which does not exist");
    }
    std::vector<TensorInfo> infos = read_safetensors_header(path);
    impl->shards.push_back(Shard{path, fs::file_size(path), infos.size()});
    auto mapping = std::make_unique<Impl::Mapping>();
    mapping->size_bytes = impl->shards.back().size_bytes;
    impl->mappings.push_back(std::move(mapping));
    for (TensorInfo& t : infos) impl->tensors.push_back(std::move(t));
  }

  auto& by_name = impl->by_name;
  by_name.reserve(impl->tensors.size());
  for (uint32_t i = 0; i < impl->tensors.size(); ++i) {
    const TensorInfo& t = impl->tensors[i];
    auto [it, inserted] = by_name.try_emplace(t.name, i);
    if (!inserted) {
      fail("checkpoint ", dir, ": tensor ", t.name, " is in both ", impl->tensors[it->second].file,
           " and ", t.file);
    }
  }
  if (indexed) {
    // Every tensor of every shard is listed for that shard; equal counts then make it a bijection.
    for (size_t s = 0, i = 0; s < impl->shards.size(); ++s) {
      for (size_t k = 0; k < impl->shards[s].n_tensors; ++k, ++i) {
        const TensorInfo& t = impl->tensors[i];
        auto it = index.weight_map.find(t.name);
        if (it == index.weight_map.end()) {
          fail("checkpoint ", dir, ": shard ", index.shards[s], " holds tensor ", t.name,
               ", which ", kIndexFileName, " does not list");
        }
        if (it->second != s) {
          fail("checkpoint ", dir, ": ", kIndexFileName, " puts tensor ", t.name, " in ",
               index.shards[it->second], " but it is in ", index.shards[s]);
        }
      }
    }
    if (index.weight_map.size() != impl->tensors.size()) {
      for (const auto& [name, shard] : index.weight_map) {
        if (!by_name.count(name)) {
          fail("checkpoint ", dir, ": ", kIndexFileName, " lists tensor ", name, " in shard ",
               index.shards[shard], ", which does not hold it");
        }
      }
    }
  }
  return Checkpoint(std::move(impl));
}

std::span<const uint8_t> Checkpoint::map(const TensorInfo& tensor) const {
  size_t s = 0;
  while (s < impl_->shards.size() && impl_->shards[s].path != tensor.file) ++s;
  if (s == impl_->shards.size()) {
    fail("checkpoint ", impl_->dir, ": tensor ", tensor.name, " names file ", tensor.file,
         ", which is not one of its shards");
  }
  Impl::Mapping& m = *impl_->mappings[s];
  if (tensor.offset > m.size_bytes || tensor.nbytes > m.size_bytes - tensor.offset) {
    fail("file ", tensor.file, ": tensor ", tensor.name, " lies outside the file");
  }
  std::call_once(m.once, [&] {
    const int fd = ::open(tensor.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("file ", tensor.file, ": cannot open: ", std::strerror(errno));
    void* p = ::mmap(nullptr, m.size_bytes, PROT_READ, MAP_SHARED, fd, 0);
    const int mmap_errno = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail("file ", tensor.file, ": mmap failed: ", std::strerror(mmap_errno));
    m.base = static_cast<const uint8_t*>(p);
  });
  return {m.base + tensor.offset, static_cast<size_t>(tensor.nbytes)};
}

}  // namespace deltafin::format
