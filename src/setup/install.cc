// install.json reading and writing.
#include "setup/install.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "setup/files.h"

namespace deltafin::setup {

using base::fail;
using nlohmann::json;

const char* install_kind_name(InstallKind kind) {
  return kind == InstallKind::kFull ? "full" : "stream";
}

std::string InstallRecord::to_json() const {
  json j;
  j["format"] = "deltafin-install";
  j["version"] = 1;
  j["kind"] = install_kind_name(kind);
  j["endpoint"] = endpoint;
  j["repo"] = repo;
  j["revision"] = revision;
  j["commit"] = commit;
  json s = json::array();
  for (const RemoteFile& f : shards)
    s.push_back({{"name", f.name}, {"size", f.size}, {"sha256", f.sha256}});
  j["shards"] = s;
  j["local_files"] = local_files;
  j["full_bytes"] = full_bytes;
  j["spine_bytes"] = spine_bytes;
  j["expert_bytes"] = expert_bytes;
  return j.dump(2) + "\n";
}

InstallRecord InstallRecord::parse(const std::string& json_text, const std::string& path) {
  InstallRecord r;
  try {
    const json j = json::parse(json_text);
    if (j.value("format", "") != "deltafin-install" || j.value("version", 0) != 1)
      fail("install record ", path, ": not a version-1 deltafin install record");
    const std::string kind = j.at("kind").get<std::string>();
    if (kind != "full" && kind != "stream")
      fail("install record ", path, ": unknown kind '", kind, "'");
    r.kind = kind == "full" ? InstallKind::kFull : InstallKind::kStream;
    r.endpoint = j.at("endpoint").get<std::string>();
    r.repo = j.at("repo").get<std::string>();
    r.revision = j.at("revision").get<std::string>();
    r.commit = j.at("commit").get<std::string>();
    for (const json& f : j.at("shards"))
      r.shards.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                          f.at("sha256").get<std::string>()});
    r.local_files = j.at("local_files").get<std::vector<std::string>>();
    r.full_bytes = j.at("full_bytes").get<uint64_t>();
    r.spine_bytes = j.at("spine_bytes").get<uint64_t>();
    r.expert_bytes = j.at("expert_bytes").get<uint64_t>();
  } catch (const json::exception& e) {
    fail("install record ", path, ": ", e.what());
  }
  return r;
}

std::optional<InstallRecord> read_install(const std::string& model_dir) {
  const std::string path = join_path(model_dir, kInstallRecord);
  if (!file_size(path)) return std::nullopt;
  return InstallRecord::parse(read_small_file(path), path);
}

void write_install(const std::string& model_dir, const InstallRecord& record) {
  write_file_atomic(join_path(model_dir, kInstallRecord), record.to_json());
}

bool is_streaming_install(const std::string& model_dir) {
  const auto r = read_install(model_dir);
  return r && r->kind == InstallKind::kStream;
}

}  // namespace deltafin::setup
