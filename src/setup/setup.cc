// The setup sequence: resolve the commit, fetch the small files, read every shard's header by
// range requests, decide full or streaming, then download shards or build the spine. Files reach
// their final names only once verified; install.json is written last.
#include "setup/setup.h"

#include <dirent.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "base/log.h"
#include "base/stopwatch.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "setup/download.h"
#include "setup/expert_manifest.h"
#include "setup/files.h"
#include "setup/progress.h"
#include "setup/spine.h"

namespace deltafin::setup {

using base::fail;
using base::log_info;
using base::str_cat;

namespace {

struct SmallFile {
  const char* name;
  const char* local;  // where it goes in the install folder
  bool required;
};
// The index goes under .deltafin: the folder's model.safetensors.index.json is written last, and
// for a streaming install it lists the spine instead.
const SmallFile kSmallFiles[] = {
    {"config.json", "config.json", true},
    {"model.safetensors.index.json", kRemoteIndex, true},
    {"generation_config.json", "generation_config.json", false},
    {"tokenizer_config.json", "tokenizer_config.json", false},
    {"tiktoken.model", "tiktoken.model", false},
    {"LICENSE", "LICENSE", false},
};

struct RemoteShard {
  RemoteFile file;
  std::vector<format::TensorInfo> tensors;  // offset order; TensorInfo::file = the shard's name
};

// Fetches one small file, verified against the pinned size and hash when deltafin pins them, else
// against what the server publishes. Returns false when an optional file does not exist.
bool fetch_small_file(HttpClient& client, const RemoteRepo& remote, const std::string& dir,
                      const SmallFile& f, const std::vector<PinnedFile>& pins) {
  const std::string url = remote.file_url(f.name);
  RemoteMeta meta;
  try {
    meta = remote_meta(client, url);
  } catch (const HttpError& e) {
    if (e.status() == 404 && !f.required) {
      log_info("setup: ", f.name, " is not in the repository; skipped");
      return false;
    }
    throw;
  }
  ExpectedDigest digest;
  if (meta.digest_kind) digest = {*meta.digest_kind, meta.digest};
  for (const PinnedFile& pin : pins) {
    if (pin.name != std::string(f.name)) continue;
    if (meta.size && *meta.size != pin.size) {
      fail(f.name, " at ", remote.revision, ": the server reports ", *meta.size,
           " bytes, deltafin pins ", pin.size, " for this revision");
    }
    if (meta.digest_kind == DigestKind::kSha256 && meta.digest != pin.sha256) {
      fail(f.name, " at ", remote.revision, ": the server publishes sha256 ", meta.digest,
           ", deltafin pins ", pin.sha256);
    }
    meta.size = pin.size;
    digest = {DigestKind::kSha256, pin.sha256};
  }
  if (!meta.size) {  // no size in the HEAD answer: ask for one byte and read the total
    uint64_t total = 0;
    client.get_range(
        url, 0, 1, [](const char*, size_t) {}, &total);
    meta.size = total;
  }
  const std::string dest = join_path(dir, f.local);
  make_dirs(parent_dir(dest));
  // A small file already there is checked again (cheap), so an edited one is replaced.
  if (auto s = file_size(dest); s && *s == *meta.size && !digest.hex.empty() &&
                                file_digest_hex(digest.kind, dest, *s) != digest.hex) {
    log_info("setup: ", dest, " differs from the repository; downloading it again");
    remove_file(dest);
  }
  download_file(client, url, dest, *meta.size, digest, nullptr);
  return true;
}

// Sizes, hashes and headers of every shard, cached in .deltafin so a rerun needs no requests.
std::vector<RemoteShard> fetch_remote_shards(const SetupOptions& o, const RemoteRepo& remote,
                                             const format::ShardIndex& index, HttpStats* stats,
                                             RedirectCache* redirects, const HttpOptions& http) {
  const std::string dir = o.dir;
  const std::string state_path = join_path(dir, kRemoteState);
  std::unordered_map<std::string, RemoteFile> cached;
  if (file_size(state_path)) {
    try {
      const nlohmann::json j = nlohmann::json::parse(read_small_file(state_path));
      if (j.value("commit", "") == remote.revision) {
        for (const auto& f : j.at("files"))
          cached[f.at("name")] = {f.at("name"), f.at("size"), f.at("sha256")};
      }
    } catch (const std::exception&) {  // a damaged cache is refetched
    }
  }
  std::vector<RemoteShard> shards(index.shards.size());
  std::atomic<bool> stop{false};
  run_parallel(shards.size(), o.jobs, http, stats, redirects, &stop, [&](size_t i, HttpClient& c) {
    const std::string& name = index.shards[i];
    check_remote_file_name(name, "model.safetensors.index.json");
    const std::string header_path = join_path(join_path(dir, kHeaderDir), name + ".header");
    RemoteShard& s = shards[i];
    if (auto it = cached.find(name); it != cached.end() && file_size(header_path)) {
      try {
        s.file = it->second;
        s.tensors =
            format::parse_safetensors_header(read_small_file(header_path), s.file.size, name);
        return;
      } catch (const base::Error&) {  // refetch below
      }
    }
    const std::string url = remote.file_url(name);
    const RemoteMeta meta = remote_meta(c, url);
    const ShardHeader h = fetch_shard_header(c, url);
    if (meta.size && *meta.size != h.file_size) {
      fail(name, ": the server reports ", *meta.size, " bytes in HEAD but ", h.file_size,
           " in Content-Range");
    }
    s.file = {name, h.file_size, meta.digest_kind == DigestKind::kSha256 ? meta.digest : ""};
    s.tensors = format::parse_safetensors_header(h.prefix, h.file_size, name);
    write_file_atomic(header_path, h.prefix);
  });
  nlohmann::json files = nlohmann::json::array();
  for (const RemoteShard& s : shards)
    files.push_back({{"name", s.file.name}, {"size", s.file.size}, {"sha256", s.file.sha256}});
  write_file_atomic(state_path,
                    nlohmann::json{{"commit", remote.revision}, {"files", files}}.dump() + "\n");

  // The index and the headers must agree, as format::Checkpoint will require of the result.
  std::unordered_map<std::string_view, uint32_t> weight_map;
  for (const format::ShardIndex::Entry& e : index.entries) {
    if (!weight_map.emplace(e.name, e.shard).second)
      fail("model.safetensors.index.json lists ", e.name, " twice");
  }
  size_t n_tensors = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const format::TensorInfo& t : shards[i].tensors) {
      auto it = weight_map.find(t.name);
      if (it == weight_map.end())
        fail(shards[i].file.name, ": tensor ", t.name, " is not in model.safetensors.index.json");
      if (it->second != i)
        fail("model.safetensors.index.json puts ", t.name, " in ", index.shards[it->second],
             " but it is in ", shards[i].file.name);
      ++n_tensors;
    }
  }
  if (n_tensors != weight_map.size()) {
    fail("model.safetensors.index.json lists ", weight_map.size(), " tensors, the shards hold ",
         n_tensors);
  }
  return shards;
}

// Files of an earlier streaming install (or leftovers of an interrupted one) in `dir`.
std::vector<std::string> spine_files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("spine-", 0) == 0 && n.find(".safetensors") != std::string::npos)
        out.push_back(n);
    }
    ::closedir(d);
  }
  return out;
}

void remove_tree(const std::string& path) {
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      const std::string p = join_path(path, n);
      if (e->d_type == DT_DIR)
        remove_tree(p);
      else
        remove_file(p);
    }
    ::closedir(d);
    ::rmdir(path.c_str());
  }
}

}  // namespace

SetupReport run_setup(const SetupOptions& o) {
  const base::Stopwatch watch;
  check_repo_id(o.remote.repo);
  RemoteRepo remote = o.remote;
  const std::string& dir = o.dir;
  HttpOptions http = o.http;
  if (http.token_host.empty()) http.token_host = remote.host();
  HttpStats stats;
  RedirectCache redirects;
  HttpClient client(http, &stats, &redirects);
  SetupReport report;

  const std::optional<InstallRecord> existing = read_install(dir);
  if (existing && existing->repo != remote.repo)
    fail(dir, " holds an install of ", existing->repo, ", not ", remote.repo,
         "; choose another --dir");

  // 1. Resolve the revision to a commit, so that every file comes from the same one.
  make_dirs(join_path(dir, kHeaderDir));
  const RemoteMeta config_meta = remote_meta(client, remote.file_url("config.json"));
  const std::string commit = config_meta.commit.empty() ? remote.revision : config_meta.commit;
  if (existing && existing->commit != commit) {
    fail(dir, " holds ", remote.repo, " at ", existing->commit, ", but --revision ",
         remote.revision, " is ", commit, "; choose another --dir or remove the old install");
  }
  report.commit = commit;
  log_info("setup: ", remote.repo, " at ", commit,
           commit != remote.revision ? " (" + remote.revision + ")" : "", " from ", remote.endpoint,
           " into ", dir);
  const std::string asked_revision = remote.revision;
  remote.revision = commit;

  // 2. Small files, verified.
  const std::vector<PinnedFile> pins = pinned_files(remote.repo, commit);
  std::vector<std::string> local_files;
  for (const SmallFile& f : kSmallFiles) {
    if (fetch_small_file(client, remote, dir, f, pins) && f.local[0] != '.')
      local_files.push_back(f.local);
  }
  const std::string index_path = join_path(dir, kRemoteIndex);
  const std::string index_text = read_small_file(index_path);
  const format::ShardIndex index = format::parse_shard_index(index_text, index_path);
  std::optional<format::ModelConfig> config;
  std::string config_error;
  try {
    config = format::load_config(dir);
  } catch (const base::Error& e) {
    config_error = e.what();
  }

  // 3. Every shard's size, hash and header.
  const std::vector<RemoteShard> shards =
      fetch_remote_shards(o, remote, index, &stats, &redirects, http);
  std::vector<RemoteFile> files;
  std::vector<std::vector<format::TensorInfo>> shard_tensors;
  std::vector<format::TensorInfo> all_tensors;
  for (const RemoteShard& s : shards) {
    files.push_back(s.file);
    shard_tensors.push_back(s.tensors);
    all_tensors.insert(all_tensors.end(), s.tensors.begin(), s.tensors.end());
    report.full_bytes += s.file.size;
  }

  // 4. What each kind of install would need.
  std::optional<ExpertSplit> split;
  std::vector<SpineShard> spine;
  uint64_t spine_bytes = 0;
  if (config) {
    split = split_experts(*config, all_tensors, files);
    std::unordered_set<std::string> experts;
    for (size_t i = 0; i < all_tensors.size(); ++i)
      if (split->is_expert[i]) experts.insert(all_tensors[i].name);
    spine = plan_spine(shard_tensors,
                       [&](const format::TensorInfo& t) { return !experts.count(t.name); });
    for (const SpineShard& s : spine) spine_bytes += s.file_bytes;
  }
  uint64_t full_have = 0, spine_have = 0;
  for (const RemoteFile& f : files) full_have += local_progress(join_path(dir, f.name), f.size);
  for (const SpineShard& s : spine)
    spine_have += local_progress(join_path(dir, s.name), s.file_bytes);
  const uint64_t full_need = report.full_bytes - full_have;
  const uint64_t spine_need = spine_bytes - spine_have;
  const uint64_t free = free_bytes(dir);
  const uint64_t reserve = std::min<uint64_t>(uint64_t{1} << 30, report.full_bytes / 50);
  const std::string full_words =
      str_cat("a full install needs ", human_bytes(report.full_bytes),
              full_have ? str_cat(" (", human_bytes(full_need), " still to download)") : "");
  const std::string stream_words =
      config ? str_cat("a streaming install needs ", human_bytes(spine_bytes),
                       " now (the spine) and fetches the ",
                       human_bytes(split->manifest.total_bytes()), " of experts on demand")
             : str_cat("a streaming install is not possible: ", config_error);

  InstallMode mode = o.mode;
  if (mode == InstallMode::kAuto && existing)
    mode = existing->kind == InstallKind::kFull ? InstallMode::kFull : InstallMode::kStream;
  if (mode == InstallMode::kStream && existing && existing->kind == InstallKind::kFull) {
    log_info("setup: ", dir, " is already a full install; nothing to do");
    report.kind = InstallKind::kFull;
    report.local_bytes = report.full_bytes;
    return report;
  }
  if (mode == InstallMode::kAuto) {
    if (free >= full_need + reserve) {
      mode = InstallMode::kFull;
      report.decision =
          str_cat(human_bytes(free), " free at ", dir, " and ", full_words, ": full install");
    } else if (config && free >= spine_need + reserve) {
      mode = InstallMode::kStream;
      report.decision = str_cat(full_words, " but only ", human_bytes(free), " is free at ", dir,
                                "; ", stream_words, ": streaming install");
    } else {
      fail("not enough disk at ", dir, ": ", human_bytes(free), " free; ", full_words, "; ",
           stream_words);
    }
  } else if (mode == InstallMode::kFull) {
    if (free < full_need)
      fail("not enough disk at ", dir, " for --full: ", full_words, ", ", human_bytes(free),
           " is free; ", stream_words, " (--stream)");
    report.decision = str_cat("--full: ", full_words);
  } else {
    if (!config) fail("--stream: ", config_error);
    if (free < spine_need)
      fail("not enough disk at ", dir, " for --stream: ", stream_words, "; ", human_bytes(free),
           " is free");
    report.decision = str_cat("--stream: ", stream_words, "; ", full_words);
  }
  log_info("setup: ", report.decision);

  std::atomic<bool> stop{false};
  InstallRecord record;
  record.endpoint = remote.endpoint;
  record.repo = remote.repo;
  record.revision = asked_revision;
  record.commit = commit;
  record.shards = files;
  record.full_bytes = report.full_bytes;
  record.spine_bytes = spine_bytes;
  record.expert_bytes = split ? split->manifest.total_bytes() : 0;

  if (mode == InstallMode::kFull) {
    Progress progress("download", report.full_bytes);
    run_parallel(
        files.size(), o.jobs, http, &stats, &redirects, &stop, [&](size_t i, HttpClient& c) {
          const RemoteFile& f = files[i];
          const std::string dest = join_path(dir, f.name);
          if (auto s = file_size(dest); s && *s == f.size) {
            progress.add(f.size);
            return;
          }
          download_file(c, remote.file_url(f.name), dest, f.size, {DigestKind::kSha256, f.sha256},
                        &progress, &stop);
          if (f.sha256
                  .empty()) {  // no published hash: at least the header must be the one read before
            const std::string want =
                read_small_file(join_path(join_path(dir, kHeaderDir), f.name + ".header"));
            if (file_digest_hex(DigestKind::kSha256, dest, 0, want.size()) != sha256_hex(want)) {
              remove_file(dest);
              fail(dest,
                   ": the downloaded header differs from the one read at the start; the file was "
                   "removed");
            }
          }
        });
    progress.finish();
    write_file_atomic(join_path(dir, format::kIndexFileName), index_text);
    for (const RemoteFile& f : files) local_files.push_back(f.name);
    record.kind = InstallKind::kFull;
    record.local_files = local_files;
    write_install(dir, record);
    // A streaming install upgraded to a full one: its spine, cache and manifest are redundant now.
    for (const std::string& n : spine_files_in(dir)) remove_file(join_path(dir, n));
    remove_tree(join_path(dir, kExpertCacheDir));
    remove_file(join_path(dir, kExpertManifest));
    report.local_bytes = report.full_bytes;
  } else {
    // Partial downloads of an abandoned full install would only hold space the user lacks.
    for (const RemoteFile& f : files) {
      if (auto s = file_size(join_path(dir, f.name + ".partial"))) {
        log_info("setup: removing the partial full download ", f.name, ".partial (",
                 human_bytes(*s), ")");
        remove_file(join_path(dir, f.name + ".partial"));
        remove_file(join_path(dir, f.name + ".partial.mark"));
      }
    }
    std::unordered_map<std::string, size_t> file_of;
    for (size_t i = 0; i < files.size(); ++i) file_of[files[i].name] = i;
    Progress progress("spine", spine_bytes);
    run_parallel(spine.size(), o.jobs, http, &stats, &redirects, &stop,
                 [&](size_t i, HttpClient& c) {
                   const SpineShard& s = spine[i];
                   build_spine_shard(c, remote.file_url(s.remote_file), s, join_path(dir, s.name),
                                     &progress, &stop);
                 });
    progress.finish();
    write_file_atomic(join_path(dir, kExpertManifest), split->manifest.to_json());
    make_dirs(join_path(dir, kExpertCacheDir));
    write_file_atomic(join_path(dir, format::kIndexFileName),
                      spine_index_json(spine, shard_tensors));
    for (const SpineShard& s : spine) local_files.push_back(s.name);
    record.kind = InstallKind::kStream;
    record.local_files = local_files;
    write_install(dir, record);
    report.local_bytes = spine_bytes;
  }
  report.kind = record.kind;
  report.downloaded_bytes = stats.bytes.load();
  report.seconds = watch.elapsed_seconds();
  return report;
}

}  // namespace deltafin::setup
