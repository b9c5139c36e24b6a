// The local half of a streaming install: every non-expert tensor of the remote shards, copied into
// spine shards (one per remote shard that has any, tensors in their remote order) with their own
// model.safetensors.index.json, so format::Checkpoint opens a streaming install like any folder.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/safetensors.h"
#include "format/safetensors_writer.h"
#include "setup/http.h"

namespace deltafin::setup {

class Progress;

// Remote tensors that are adjacent in their file are fetched by one request.
struct SpineRun {
  uint64_t remote_offset = 0;
  uint64_t local_offset = 0;  // absolute, in the spine shard
  uint64_t nbytes = 0;
};

struct SpineShard {
  std::string name;         // "spine-00001-of-00002.safetensors"
  std::string remote_file;  // the remote shard its tensors come from
  std::string prefix;       // the 8-byte length and the JSON header, as written
  std::vector<std::string> tensor_names;
  std::vector<SpineRun> runs;  // ascending, back to back from prefix.size()
  uint64_t file_bytes = 0;
};

// `shards[i]` holds remote shard i's tensors in offset order (TensorInfo::file = its name);
// `keep` selects the spine tensors. Shards with nothing kept get no spine shard.
// `metadata` is the written header's __metadata__.
std::vector<SpineShard> plan_spine(const std::vector<std::vector<format::TensorInfo>>& shards,
                                   const std::function<bool(const format::TensorInfo&)>& keep,
                                   const format::SafetensorsMetadata& metadata = {
                                       {"format", "pt"}});

// Writes one spine shard to `dest` from `url` (the remote shard): resumable through
// dest.partial, checked (size, and the written header parses back to the same tensors), fsynced
// and renamed into place. Returns the bytes transferred; an existing complete `dest` is kept.
uint64_t build_spine_shard(HttpClient& client, const std::string& url, const SpineShard& shard,
                           const std::string& dest, Progress* progress,
                           const std::atomic<bool>* stop);

// The spine's model.safetensors.index.json.
std::string spine_index_json(const std::vector<SpineShard>& shards,
                             const std::vector<std::vector<format::TensorInfo>>& remote_shards);

}  // namespace deltafin::setup
