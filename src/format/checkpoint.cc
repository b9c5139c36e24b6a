// Checkpoint folders: the shard index (~500k entries for K3, kept as views into its text), the
// headers of every shard read in parallel, their cross-checks, and lazily mapped shards.
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
#include <unordered_map>

#include "base/error.h"
#include "base/thread_pool.h"
#include "format/json_reader.h"
#include "format/name_table.h"

namespace deltafin::format {

using base::fail;

namespace {

using detail::JsonReader;

struct ViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Reads {"metadata": ..., "weight_map": {name: shard, ...}, ...}; other keys are skipped.
class IndexReader {
 public:
  IndexReader(const std::string& path, ShardIndex& out)
      : reader_(*out.text, path), path_(path), out_(out) {}

  void read() {
    if (reader_.peek() != JsonReader::Type::kObject) {
      fail(path_, ": the index is ", JsonReader::type_name(reader_.peek()),
           ", expected a JSON object");
    }
    reader_.begin_object();
    bool saw_weight_map = false;
    std::string_view key;
    while (reader_.next_key(&key)) {
      if (key != "weight_map") {
        reader_.skip_value();
        continue;
      }
      if (saw_weight_map) fail(path_, ": weight_map appears twice");
      saw_weight_map = true;
      read_weight_map();
    }
    reader_.expect_end();
    if (!saw_weight_map) fail(path_, ": no weight_map object");
  }

 private:
  void read_weight_map() {
    if (reader_.peek() != JsonReader::Type::kObject) {
      fail(path_, ": weight_map is ", JsonReader::type_name(reader_.peek()),
           ", expected an object");
    }
    reader_.begin_object();
    std::string_view name;
    const char* const text_begin = out_.text->data();
    while (reader_.next_key(&name)) {
      // A name with escapes was decoded into the reader's scratch buffer: keep a copy.
      if (name.data() < text_begin || name.data() >= text_begin + out_.text->size()) {
        name = out_.decoded.emplace_back(name);
      }
      if (reader_.peek() != JsonReader::Type::kString) {
        fail(path_, ": weight_map[\"", name, "\"] is ", JsonReader::type_name(reader_.peek()),
             ", expected a shard file name");
      }
      const std::string_view shard = reader_.read_string();
      auto it = shard_ids_.find(shard);
      if (it == shard_ids_.end()) {
        if (shard.empty() || shard == "." || shard == ".." ||
            shard.find('/') != std::string_view::npos ||
            shard.find('\0') != std::string_view::npos) {
          fail(path_, ": weight_map[\"", name, "\"] = \"", shard,
               "\" is not a plain file name in the model folder");
        }
        it =
            shard_ids_.emplace(std::string(shard), static_cast<uint32_t>(out_.shards.size())).first;
        out_.shards.emplace_back(shard);
      }
      out_.entries.push_back({name, it->second});
    }
  }

  JsonReader reader_;
  const std::string& path_;
  ShardIndex& out_;
  std::unordered_map<std::string, uint32_t, ViewHash, std::equal_to<>> shard_ids_;
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

ShardIndex parse_shard_index(std::string json_text, const std::string& path) {
  ShardIndex index;
  index.text = std::make_unique<const std::string>(std::move(json_text));
  IndexReader(path, index).read();
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
  for (ShardIndex::Entry& e : index.entries) e.shard = new_id[e.shard];
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
  detail::NameTable by_name;  // over `tensors`, which never changes after open()
  std::vector<std::unique_ptr<Mapping>> mappings;  // one per shard
  std::unique_ptr<Checkpoint> overlay;             // see set_overlay()

  int64_t find(std::string_view name) const {
    return by_name.find(name, [this](size_t i) -> std::string_view { return tensors[i].name; });
  }

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

void Checkpoint::set_overlay(Checkpoint overlay) {
  DF_ASSERT(impl_->overlay == nullptr);
  impl_->overlay = std::make_unique<Checkpoint>(std::move(overlay));
}

const Checkpoint* Checkpoint::overlay() const { return impl_->overlay.get(); }

const TensorInfo* Checkpoint::find(std::string_view name) const {
  if (impl_->overlay != nullptr) {
    if (const TensorInfo* t = impl_->overlay->find(name)) return t;
  }
  const int64_t i = impl_->find(name);
  return i < 0 ? nullptr : &impl_->tensors[static_cast<size_t>(i)];
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

  const size_t n_shards = index.shards.size();
  std::vector<std::string> paths(n_shards);
  for (size_t s = 0; s < n_shards; ++s) {
    paths[s] = (fs::path(dir) / index.shards[s]).string();
    if (!fs::exists(paths[s], ec)) {
      fail("checkpoint ", dir, ": ", kIndexFileName, " names shard ", index.shards[s],
           ", which does not exist");
    }
  }
  // Headers are independent reads (K3: 96 of about 1 MB): read them in parallel, report the first
  // broken shard in name order whatever the scheduling.
  std::vector<std::vector<TensorInfo>> per_shard(n_shards);
  std::vector<std::string> errors(n_shards);
  base::ThreadPool pool(
      static_cast<int>(std::clamp<size_t>(n_shards, 1, std::min(8, base::available_cpus()))));
  pool.parallel_for(n_shards, 1, [&](size_t begin, size_t end) {
    for (size_t s = begin; s < end; ++s) {
      try {
        per_shard[s] = read_safetensors_header(paths[s]);
      } catch (const std::exception& e) {
        errors[s] = e.what();
      }
    }
  });
  size_t n_tensors = 0;
  for (size_t s = 0; s < n_shards; ++s) {
    if (!errors[s].empty()) fail(errors[s]);
    n_tensors += per_shard[s].size();
  }
  if (n_tensors >= UINT32_MAX) fail("checkpoint ", dir, ": ", n_tensors, " tensors are too many");
  impl->tensors.reserve(n_tensors);
  for (size_t s = 0; s < n_shards; ++s) {
    impl->shards.push_back(Shard{paths[s], fs::file_size(paths[s]), per_shard[s].size()});
    auto mapping = std::make_unique<Impl::Mapping>();
    mapping->size_bytes = impl->shards.back().size_bytes;
    impl->mappings.push_back(std::move(mapping));
    for (TensorInfo& t : per_shard[s]) impl->tensors.push_back(std::move(t));
    std::vector<TensorInfo>().swap(per_shard[s]);
  }

  const std::vector<TensorInfo>& tensors = impl->tensors;
  const int64_t dup = impl->by_name.build(
      tensors.size(), [&](size_t i) -> std::string_view { return tensors[i].name; });
  if (dup >= 0) {
    const TensorInfo& t = tensors[static_cast<size_t>(dup)];
    fail("checkpoint ", dir, ": tensor ", t.name, " is in both ",
         tensors[static_cast<size_t>(impl->find(t.name))].file, " and ", t.file);
  }
  if (indexed) {
    // Each index entry names a tensor of the shard it gives, once; then every tensor is listed.
    std::vector<uint32_t> shard_of(tensors.size());
    for (uint32_t s = 0, i = 0; s < impl->shards.size(); ++s) {
      for (size_t k = 0; k < impl->shards[s].n_tensors; ++k) shard_of[i++] = s;
    }
    std::vector<bool> listed(tensors.size(), false);
    for (const ShardIndex::Entry& e : index.entries) {
      const int64_t i = impl->find(e.name);
      if (i < 0) {
        fail("checkpoint ", dir, ": ", kIndexFileName, " lists tensor ", e.name, " in shard ",
             index.shards[e.shard], ", which does not hold it");
      }
      const size_t t = static_cast<size_t>(i);
      if (shard_of[t] != e.shard) {
        fail("checkpoint ", dir, ": ", kIndexFileName, " puts tensor ", e.name, " in ",
             index.shards[e.shard], " but it is in ", index.shards[shard_of[t]]);
      }
      if (listed[t]) {
        fail("checkpoint ", dir, ": ", kIndexFileName, " lists tensor ", e.name, " twice");
      }
      listed[t] = true;
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (!listed[t]) {
        fail("checkpoint ", dir, ": shard ", index.shards[shard_of[t]], " holds tensor ",
             tensors[t].name, ", which ", kIndexFileName, " does not list");
      }
    }
  }
  return Checkpoint(std::move(impl));
}

std::span<const uint8_t> Checkpoint::map(const TensorInfo& tensor) const {
  size_t s = 0;
  while (s < impl_->shards.size() && impl_->shards[s].path != tensor.file) ++s;
  if (s == impl_->shards.size() && impl_->overlay != nullptr) return impl_->overlay->map(tensor);
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
