// Reassembles each remote shard from the spine shards and the expert cache and hashes it.
#include "setup/verify.h"

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "format/config.h"
#include "setup/digest.h"
#include "setup/expert_manifest.h"
#include "setup/files.h"
#include "setup/install.h"
#include "setup/spine.h"

namespace deltafin::setup {

using base::fail;

namespace {

void hash_range(Digest& d, const std::string& path, uint64_t offset, uint64_t n_bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open ", path);
  if (std::fseek(f, static_cast<long>(offset), SEEK_SET) != 0) {
    std::fclose(f);
    fail("cannot seek in ", path);
  }
  std::vector<char> buf(size_t{4} << 20);
  while (n_bytes > 0) {
    const size_t want = n_bytes < buf.size() ? static_cast<size_t>(n_bytes) : buf.size();
    const size_t got = std::fread(buf.data(), 1, want, f);
    if (got == 0) break;
    d.update(buf.data(), got);
    n_bytes -= got;
  }
  std::fclose(f);
  if (n_bytes != 0) fail(path, " is shorter than expected");
}

}  // namespace

std::vector<ShardCheck> verify_streaming_install(const std::string& dir) {
  const auto record = read_install(dir);
  if (!record || record->kind != InstallKind::kStream) fail(dir, " is not a streaming install");
  const format::ModelConfig config = format::load_config(dir);
  // The remote shards' tensors, from the headers setup kept.
  std::vector<std::vector<format::TensorInfo>> shards;
  std::vector<std::string> prefixes;
  std::vector<format::TensorInfo> all;
  for (const RemoteFile& f : record->shards) {
    const std::string path = join_path(join_path(dir, kHeaderDir), f.name + ".header");
    prefixes.push_back(read_small_file(path));
    shards.push_back(format::parse_safetensors_header(prefixes.back(), f.size, f.name));
    all.insert(all.end(), shards.back().begin(), shards.back().end());
  }
  const ExpertSplit split = split_experts(config, all, record->shards);
  std::unordered_set<std::string> expert_names;
  for (size_t i = 0; i < all.size(); ++i)
    if (split.is_expert[i]) expert_names.insert(all[i].name);
  const std::vector<SpineShard> spine =
      plan_spine(shards, [&](const format::TensorInfo& t) { return !expert_names.count(t.name); });
  // Where each spine tensor is locally: (spine file, offset).
  std::unordered_map<std::string, std::pair<std::string, uint64_t>> spine_at;
  for (const SpineShard& s : spine) {
    const auto local = format::parse_safetensors_header(s.prefix, s.file_bytes, s.name);
    for (const format::TensorInfo& t : local) spine_at[t.name] = {join_path(dir, s.name), t.offset};
  }
  // Where each expert span starts: (file, offset) -> (layer, expert, bytes).
  std::map<std::pair<uint32_t, uint64_t>, std::tuple<int64_t, int64_t, uint64_t>> span_at;
  for (const ExpertLayer& l : split.manifest.layers)
    for (int64_t e = 0; e < l.n_experts(); ++e)
      span_at[{l.file[e], l.offset[e]}] = {l.layer, e, l.span_bytes};

  std::vector<ShardCheck> out;
  for (size_t i = 0; i < shards.size(); ++i) {
    ShardCheck c{record->shards[i].name, ShardCheck::Result::kOk, 0, ""};
    for (const auto& [key, span] : span_at) {
      if (key.first != i) continue;
      const auto size =
          file_size(join_path(dir, expert_cache_relpath(std::get<0>(span), std::get<1>(span))));
      if (!size || *size != std::get<2>(span)) c.n_missing++;
    }
    if (record->shards[i].sha256.empty()) {
      c.result = ShardCheck::Result::kNoHash;
    } else if (c.n_missing > 0) {
      c.result = ShardCheck::Result::kIncomplete;
    } else {
      Digest d(DigestKind::kSha256);
      d.update(prefixes[i].data(), prefixes[i].size());
      const std::vector<format::TensorInfo>& ts = shards[i];
      for (size_t k = 0; k < ts.size();) {
        if (auto it = span_at.find({static_cast<uint32_t>(i), ts[k].offset}); it != span_at.end()) {
          const auto [layer, expert, nbytes] = it->second;
          hash_range(d, join_path(dir, expert_cache_relpath(layer, expert)), 0, nbytes);
          while (k < ts.size() && ts[k].offset < it->first.second + nbytes) ++k;  // its six tensors
          continue;
        }
        const auto& [file, offset] = spine_at.at(ts[k].name);
        hash_range(d, file, offset, ts[k].nbytes);
        ++k;
      }
      const std::string got = d.hex_final();
      if (got != record->shards[i].sha256) {
        c.result = ShardCheck::Result::kMismatch;
        c.detail = "sha256 " + got + ", published " + record->shards[i].sha256;
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace deltafin::setup
