// What an install folder holds and where it came from: DIR/.deltafin/install.json, written last
// by `deltafin setup`, so a folder without it is either not an install or an unfinished one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "setup/expert_manifest.h"

namespace deltafin::setup {

inline constexpr const char* kStateDir = ".deltafin";
inline constexpr const char* kInstallRecord = ".deltafin/install.json";
inline constexpr const char* kExpertManifest = ".deltafin/experts.json";
inline constexpr const char* kRemoteIndex = ".deltafin/remote-index.json";
inline constexpr const char* kRemoteState = ".deltafin/remote.json";
inline constexpr const char* kHeaderDir = ".deltafin/headers";
inline constexpr const char* kExpertCacheDir = "experts";

enum class InstallKind { kFull, kStream };
const char* install_kind_name(InstallKind kind);  // "full", "stream"

struct InstallRecord {
  InstallKind kind = InstallKind::kFull;
  std::string endpoint;  // where it was installed from
  std::string repo;
  std::string revision;                  // as asked for (a branch, tag or commit)
  std::string commit;                    // what it resolved to; every later request uses this
  std::vector<RemoteFile> shards;        // the remote checkpoint's shards
  std::vector<std::string> local_files;  // small files and shards (full) or spine shards (stream)
  uint64_t full_bytes = 0;               // the remote shards together
  uint64_t spine_bytes = 0;              // what a streaming install keeps locally
  uint64_t expert_bytes = 0;

  std::string to_json() const;
  static InstallRecord parse(const std::string& json_text, const std::string& path_for_errors);
};

// The record of `model_dir`, or nullopt when it has none (a plain folder of shards, e.g. from
// `deltafin synth`, or an install that never finished).
std::optional<InstallRecord> read_install(const std::string& model_dir);
void write_install(const std::string& model_dir, const InstallRecord& record);
bool is_streaming_install(const std::string& model_dir);

}  // namespace deltafin::setup
