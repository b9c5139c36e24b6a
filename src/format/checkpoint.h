// A model folder's tensors: one model.safetensors, or model.safetensors.index.json and its shards.
// Locates every tensor as (file, offset, bytes, dtype, shape); maps shards for resident weights.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/safetensors.h"

namespace deltafin::format {

inline constexpr const char* kIndexFileName = "model.safetensors.index.json";
inline constexpr const char* kSingleFileName = "model.safetensors";

// model.safetensors.index.json: the standard HF index ({"metadata": {...}, "weight_map": {...}}).
// K3's has 497,220 entries, so names are views into the index text, not copies.
struct ShardIndex {
  struct Entry {
    std::string_view name;  // into `text` (or `decoded` for names written with escapes)
    uint32_t shard;         // index into `shards`
  };
  std::vector<std::string> shards;  // distinct shard file names, sorted
  std::vector<Entry>
      entries;  // weight_map in file order; a repeated name is kept (open() refuses it)
  std::unique_ptr<const std::string> text;
  std::deque<std::string> decoded;
};
// Throws base::Error naming the file for invalid JSON, a missing or non-object weight_map, a
// non-string shard, or a shard name that is not a plain file name in the model folder.
ShardIndex parse_shard_index(std::string json_text, const std::string& path_for_errors);

class Checkpoint {
 public:
  struct Shard {
    std::string path;
    uint64_t size_bytes;
    size_t n_tensors;
  };

  // Reads DIR/model.safetensors.index.json and every shard it names (or DIR/model.safetensors),
  // validating each header, and checks the index and the shards agree exactly: every listed tensor
  // is in the shard the index names, every tensor of a shard is listed, and no name is in two
  // shards.
  static Checkpoint open(const std::string& dir);

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

  const std::string& dir() const;
  const std::vector<Shard>& shards() const;             // sorted by file name
  const std::vector<TensorInfo>& tensors() const;       // every tensor; by shard, then by offset
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  const TensorInfo& get(
      std::string_view name) const;  // throws "checkpoint DIR: missing tensor NAME"

  // Serves `overlay`'s tensors in place of this checkpoint's tensors of the same name (and beside
  // them, for names only the overlay has): find(), get() and map() look in the overlay first, while
  // tensors() and shards() stay this checkpoint's own, so inventory and the expert layout never see
  // it. The int8 spine (MODEL/spine-int8/, format/spine_int8.h) is such an overlay. Call before
  // any tensor is resolved; at most once.
  void set_overlay(Checkpoint overlay);
  const Checkpoint* overlay() const;  // nullptr without one

  // Read-only view of the tensor's bytes: its whole shard is mapped once (MAP_SHARED, PROT_READ) on
  // first use and stays mapped while the Checkpoint lives. For resident spine weights only: routed
  // experts are read with explicit reads (DESIGN.md rule 3). Thread-safe.
  std::span<const uint8_t> map(const TensorInfo& tensor) const;

 private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deltafin::format
