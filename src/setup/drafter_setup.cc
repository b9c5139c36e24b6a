// DSpark (embedding skipped) and Qwen3 drafter installs on setup's download machinery.
#include "setup/drafter_setup.h"

#include <atomic>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "base/log.h"
#include "base/stopwatch.h"
#include "format/safetensors.h"
#include "setup/download.h"
#include "setup/files.h"
#include "setup/install.h"
#include "setup/progress.h"
#include "setup/spine.h"

namespace deltafin::setup {

using base::fail;
using base::log_info;

namespace {

const PinnedFile* find_pin(const std::vector<PinnedFile>& pins, const std::string& name) {
  for (const PinnedFile& p : pins)
    if (name == p.name) return &p;
  return nullptr;
}

// Size and expected digest of a remote file: the server's (sha256 for LFS files, git blob sha1
// for regular ones), checked against deltafin's pin where it has one. nullopt: an optional file
// the repository does not have.
struct RemoteFileFacts {
  uint64_t size = 0;
  ExpectedDigest digest;
};
std::optional<RemoteFileFacts> remote_facts(HttpClient& client, const RemoteRepo& remote,
                                            const std::string& name, bool required,
                                            const std::vector<PinnedFile>& pins) {
  const std::string url = remote.file_url(name);
  RemoteMeta meta;
  try {
    meta = remote_meta(client, url);
  } catch (const HttpError& e) {
    if (e.status() == 404 && !required) {
      log_info("setup: ", remote.repo, ": ", name, " is not in the repository; skipped");
      return std::nullopt;
    }
    throw;
  }
  RemoteFileFacts f;
  if (meta.digest_kind) f.digest = {*meta.digest_kind, meta.digest};
  if (const PinnedFile* pin = find_pin(pins, name)) {
    if (meta.size && *meta.size != pin->size)
      fail(remote.repo, " ", name, " at ", remote.revision, ": the server reports ", *meta.size,
           " bytes, deltafin pins ", pin->size);
    if (meta.digest_kind == DigestKind::kSha256 && meta.digest != pin->sha256)
      fail(remote.repo, " ", name, " at ", remote.revision, ": the server publishes sha256 ",
           meta.digest, ", deltafin pins ", pin->sha256);
    meta.size = pin->size;
    f.digest = {DigestKind::kSha256, pin->sha256};
  }
  if (!meta.size) {  // no size in the HEAD answer: ask for one byte and read the total
    uint64_t total = 0;
    client.get_range(
        url, 0, 1, [](const char*, size_t) {}, &total);
    meta.size = total;
  }
  f.size = *meta.size;
  return f;
}

// Resolves the revision to the commit config.json reports and checks the folder's record.
std::string resolve_commit(HttpClient& client, const DrafterInstallOptions& o) {
  check_repo_id(o.remote.repo);
  const RemoteMeta m = remote_meta(client, o.remote.file_url("config.json"));
  const std::string commit = m.commit.empty() ? o.remote.revision : m.commit;
  const std::string record = join_path(o.dir, kDrafterRecord);
  if (file_size(record)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_small_file(record));
    } catch (const std::exception& e) {
      fail(record, ": not a drafter install record (", e.what(), "); remove the folder");
    }
    if (j.value("repo", "") != o.remote.repo || j.value("commit", "") != commit)
      fail(o.dir, " holds ", j.value("repo", "?"), " at ", j.value("commit", "?"), ", not ",
           o.remote.repo, " at ", commit, "; remove it or choose another model folder");
  }
  log_info("setup: ", o.remote.repo, " at ", commit,
           commit != o.remote.revision ? " (" + o.remote.revision + ")" : "", " into ", o.dir);
  return commit;
}

// The disk must hold what is still to come (a partial download counts as there).
void check_disk(const std::string& dest, uint64_t size) {
  const uint64_t need = size - local_progress(dest, size);
  const uint64_t free = free_bytes(parent_dir(dest));
  if (free < need)
    fail("not enough disk at ", parent_dir(dest), " for ", dest, ": ", human_bytes(need),
         " still to download, ", human_bytes(free), " free");
}

// Downloads one whole file, verified by size and digest; returns its size (0 when skipped).
uint64_t fetch_whole(HttpClient& client, const RemoteRepo& remote, const std::string& dir,
                     const std::string& name, bool required, const std::vector<PinnedFile>& pins,
                     bool show_progress) {
  const auto facts = remote_facts(client, remote, name, required, pins);
  if (!facts) return 0;
  const std::string dest = join_path(dir, name);
  // A small file already there is checked again (cheap), so an edited one is replaced.
  if (auto s = file_size(dest);
      s && *s == facts->size && !facts->digest.hex.empty() && facts->size < (uint64_t{64} << 20) &&
      file_digest_hex(facts->digest.kind, dest, *s) != facts->digest.hex) {
    log_info("setup: ", dest, " differs from the repository; downloading it again");
    remove_file(dest);
  }
  check_disk(dest, facts->size);
  std::optional<Progress> progress;
  if (show_progress) progress.emplace(remote.repo + " " + name, facts->size);
  download_file(client, remote.file_url(name), dest, facts->size, facts->digest,
                progress ? &*progress : nullptr);
  if (progress) progress->finish();
  return facts->size;
}

void write_record(const DrafterInstallOptions& o, const std::string& commit,
                  const nlohmann::json& extra) {
  nlohmann::json j = {{"format", "deltafin-drafter-install"}, {"version", 1},
                      {"endpoint", o.remote.endpoint},        {"repo", o.remote.repo},
                      {"revision", o.remote.revision},        {"commit", commit}};
  j.update(extra);
  write_file_atomic(join_path(o.dir, kDrafterRecord), j.dump(2) + "\n");
}

// Where both drafter installs start: a client for the remote repository (its token sent to the
// repository's host unless told otherwise), the state folder, the commit the revision resolves
// to, and the files pinned at that commit.
struct DrafterRemote {
  explicit DrafterRemote(const DrafterInstallOptions& o)
      : client(with_token_host(o), &stats, &redirects), remote(o.remote) {
    make_dirs(join_path(o.dir, kStateDir));
    remote.revision = resolve_commit(client, o);
    pins = pinned_files(remote.repo, remote.revision);
  }
  static HttpOptions with_token_host(const DrafterInstallOptions& o) {
    HttpOptions http = o.http;
    if (http.token_host.empty()) http.token_host = o.remote.host();
    return http;
  }

  HttpStats stats;
  RedirectCache redirects;
  HttpClient client;
  RemoteRepo remote;
  std::vector<PinnedFile> pins;
};

}  // namespace

DrafterInstallReport install_dspark(const DrafterInstallOptions& o) {
  const base::Stopwatch watch;
  DrafterRemote fetch(o);
  HttpClient& client = fetch.client;
  const RemoteRepo& remote = fetch.remote;
  const std::vector<PinnedFile>& pins = fetch.pins;
  DrafterInstallReport report;
  report.commit = remote.revision;

  report.local_bytes += fetch_whole(client, remote, o.dir, "config.json", true, pins, false);
  report.local_bytes += fetch_whole(client, remote, o.dir, "LICENSE", false, pins, false);

  // model.safetensors: its header by two range requests, then every tensor but the embedding.
  const std::string name = "model.safetensors";
  const std::string url = remote.file_url(name);
  const auto facts = remote_facts(client, remote, name, true, pins);
  const ShardHeader header = fetch_shard_header(client, url);
  if (header.file_size != facts->size)
    fail(remote.repo, " ", name, ": ", facts->size, " bytes in HEAD but ", header.file_size,
         " in Content-Range");
  if (find_pin(pins, name) && header.prefix.size() != 8 + 7520)
    fail(remote.repo, " ", name, " at ", report.commit, ": the header is ",
         header.prefix.size() - 8, " bytes, deltafin pins 7520");
  const std::vector<format::TensorInfo> tensors =
      format::parse_safetensors_header(header.prefix, header.file_size, name);
  format::SafetensorsMetadata metadata;
  {
    const nlohmann::json h = nlohmann::json::parse(header.prefix.substr(8));
    if (auto it = h.find("__metadata__"); it != h.end() && it->is_object())
      for (const auto& [k, v] : it->items())
        if (v.is_string()) metadata[k] = v.get<std::string>();
  }
  const format::TensorInfo* embedding = nullptr;
  for (const format::TensorInfo& t : tensors)
    if (t.name == kDSparkEmbedding) embedding = &t;
  if (!embedding)
    fail(remote.repo, " ", name, " has no ", kDSparkEmbedding,
         ": not a DSpark checkpoint in the Inferact/Kimi-K3-DSpark layout");
  report.skipped_bytes = embedding->nbytes;
  std::vector<SpineShard> plan = plan_spine(
      {tensors}, [](const format::TensorInfo& t) { return t.name != kDSparkEmbedding; }, metadata);
  SpineShard& shard = plan.at(0);
  shard.name = name;
  const std::string dest = join_path(o.dir, name);
  log_info("setup: ", remote.repo, ": ", tensors.size() - 1, " of ", tensors.size(), " tensors (",
           human_bytes(shard.file_bytes), "); ", kDSparkEmbedding, " (",
           human_bytes(embedding->nbytes), ") is skipped: K3's own embedding is used");
  check_disk(dest, shard.file_bytes);
  {
    Progress progress(remote.repo, shard.file_bytes);
    std::atomic<bool> stop{false};
    build_spine_shard(client, url, shard, dest, &progress, &stop);
    progress.finish();
  }
  // Verification: every tensor of the remote header but the embedding, same dtype, shape and
  // byte count (whole-file sha256 cannot be checked: the file is not the remote one).
  const std::vector<format::TensorInfo> local = format::read_safetensors_header(dest);
  std::vector<const format::TensorInfo*> want;
  for (const format::TensorInfo& t : tensors)
    if (t.name != kDSparkEmbedding) want.push_back(&t);
  bool same = local.size() == want.size();
  for (size_t i = 0; same && i < local.size(); ++i)
    same = local[i].name == want[i]->name && local[i].dtype == want[i]->dtype &&
           local[i].shape == want[i]->shape && local[i].nbytes == want[i]->nbytes;
  if (!same) {
    remove_file(dest);
    fail(dest, ": its tensors differ from the remote header's (less ", kDSparkEmbedding,
         "); the file was removed, rerun setup");
  }
  report.local_bytes += shard.file_bytes;
  write_record(o, report.commit,
               {{"skipped_tensors", {kDSparkEmbedding}},
                {"remote_model_bytes", facts->size},
                {"remote_model_sha256", facts->digest.hex},
                {"local_model_bytes", shard.file_bytes}});
  report.downloaded_bytes = fetch.stats.bytes.load();
  report.seconds = watch.elapsed_seconds();
  return report;
}

DrafterInstallReport install_qwen(const DrafterInstallOptions& o) {
  const base::Stopwatch watch;
  DrafterRemote fetch(o);
  HttpClient& client = fetch.client;
  const RemoteRepo& remote = fetch.remote;
  const std::vector<PinnedFile>& pins = fetch.pins;
  DrafterInstallReport report;
  report.commit = remote.revision;
  struct File {
    const char* name;
    bool required;
  };
  const File kFiles[] = {{"config.json", true},    {"generation_config.json", false},
                         {"tokenizer.json", true}, {"tokenizer_config.json", false},
                         {"LICENSE", false},       {"model.safetensors", true}};
  nlohmann::json names = nlohmann::json::array();
  for (const File& f : kFiles) {
    const bool big = std::string(f.name) == "model.safetensors";
    const uint64_t n = fetch_whole(client, remote, o.dir, f.name, f.required, pins, big);
    if (n) names.push_back(f.name);
    report.local_bytes += n;
  }
  // The header must parse (the sha256 above covers the bytes; this names a wrong file early).
  format::read_safetensors_header(join_path(o.dir, "model.safetensors"));
  write_record(o, report.commit, {{"files", names}});
  report.downloaded_bytes = fetch.stats.bytes.load();
  report.seconds = watch.elapsed_seconds();
  return report;
}

}  // namespace deltafin::setup
