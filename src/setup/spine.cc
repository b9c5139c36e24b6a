// Spine shard planning and resumable building.
#include "setup/spine.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/log.h"
#include "format/safetensors_writer.h"
#include "setup/download.h"
#include "setup/files.h"
#include "setup/progress.h"

namespace deltafin::setup {

using base::fail;

std::vector<SpineShard> plan_spine(const std::vector<std::vector<format::TensorInfo>>& shards,
                                   const std::function<bool(const format::TensorInfo&)>& keep,
                                   const format::SafetensorsMetadata& metadata) {
  std::vector<SpineShard> out;
  for (const auto& tensors : shards) {
    SpineShard s;
    std::vector<format::TensorDecl> decls;
    std::vector<const format::TensorInfo*> kept;
    for (const format::TensorInfo& t : tensors) {
      if (!keep(t)) continue;
      decls.push_back({t.name, t.dtype, t.shape});
      kept.push_back(&t);
    }
    if (kept.empty()) continue;
    s.remote_file = kept[0]->file;
    const std::string json = format::safetensors_header_json(decls, metadata);
    const uint64_t len = json.size();
    s.prefix.assign(reinterpret_cast<const char*>(&len), 8);  // little-endian length word
    s.prefix += json;
    uint64_t local = s.prefix.size();
    for (const format::TensorInfo* t : kept) {
      s.tensor_names.push_back(t->name);
      if (!s.runs.empty() && s.runs.back().remote_offset + s.runs.back().nbytes == t->offset) {
        s.runs.back().nbytes += t->nbytes;
      } else {
        s.runs.push_back({t->offset, local, t->nbytes});
      }
      local += t->nbytes;
    }
    s.file_bytes = local;
    out.push_back(std::move(s));
  }
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "spine-%05zu-of-%05zu.safetensors", i + 1, n);
    out[i].name = name;
  }
  return out;
}

uint64_t build_spine_shard(HttpClient& client, const std::string& url, const SpineShard& shard,
                           const std::string& dest, Progress* progress,
                           const std::atomic<bool>* stop) {
  if (auto s = file_size(dest); s && *s == shard.file_bytes) return 0;
  PartialFile part(dest, shard.file_bytes);
  if (part.size() < shard.prefix.size()) {
    part.truncate_to(0);
    part.write(shard.prefix.data(), shard.prefix.size());
  } else {
    base::log_info("resuming ", dest, " from byte ", part.size());
  }
  if (progress) progress->add(part.size());
  uint64_t transferred = 0;
  resumable_transfer(part, dest, [&] {
    for (const SpineRun& run : shard.runs) {
      const uint64_t pos = part.size();
      if (run.local_offset + run.nbytes <= pos) continue;
      const uint64_t skip =
          pos - run.local_offset;  // runs are back to back, so pos >= local_offset
      client.get_range(url, run.remote_offset + skip, run.nbytes - skip,
                       [&](const char* p, size_t n) {
                         if (stop && stop->load(std::memory_order_relaxed)) throw Cancelled();
                         part.write(p, n);
                         if (progress) progress->add(n);
                         transferred += n;
                       });
    }
  });
  const std::vector<format::TensorInfo> back = format::read_safetensors_header(part.path());
  if (back.size() != shard.tensor_names.size())
    fail(dest, ": the written header lists ", back.size(), " tensors, expected ",
         shard.tensor_names.size());
  part.publish(shard.file_bytes);
  return transferred;
}

std::string spine_index_json(const std::vector<SpineShard>& shards,
                             const std::vector<std::vector<format::TensorInfo>>& remote_shards) {
  std::unordered_map<std::string, uint64_t> nbytes;
  for (const auto& tensors : remote_shards)
    for (const format::TensorInfo& t : tensors) nbytes[t.name] = t.nbytes;
  nlohmann::json map = nlohmann::json::object();
  uint64_t total = 0;
  for (const SpineShard& s : shards) {
    for (const std::string& name : s.tensor_names) {
      map[name] = s.name;
      total += nbytes[name];
    }
  }
  nlohmann::json j;
  j["metadata"] = {{"total_size", total}};
  j["weight_map"] = map;
  return j.dump(2) + "\n";
}

}  // namespace deltafin::setup
