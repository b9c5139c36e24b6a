// Drafter installs into MODEL/drafters/<name>/ (format/drafter_dirs.h): DSpark without its
// embedding (the target's is borrowed, so its 2.35 GB are never downloaded: range requests fetch
// every other tensor into a local model.safetensors that holds exactly those), and Qwen3 Base
// drafters whole. Same HTTP, resume, verification and progress as the K3 install.
#pragma once

#include <cstdint>
#include <string>

#include "setup/http.h"
#include "setup/repo.h"

namespace deltafin::setup {

inline constexpr const char* kDSparkRepo = "Inferact/Kimi-K3-DSpark";
inline constexpr const char* kDSparkRevision = "cf6b8244620e7ea4b0651d214f28e89eac75bed6";
inline constexpr const char* kQwen06Repo = "Qwen/Qwen3-0.6B-Base";
inline constexpr const char* kQwen06Revision = "da87bfb608c14b7cf20ba1ce41287e8de496c0cd";
inline constexpr const char* kQwen17Repo = "Qwen/Qwen3-1.7B-Base";
inline constexpr const char* kQwen17Revision = "ea980cb0a6c2ae4b936e82123acc929f1cec04c1";
// The tensor a DSpark install skips.
inline constexpr const char* kDSparkEmbedding = "embed_tokens.weight";
// What a drafter folder records of its install (written last).
inline constexpr const char* kDrafterRecord = ".deltafin/drafter.json";

struct DrafterInstallOptions {
  RemoteRepo remote;  // endpoint, repository, revision as asked for
  std::string dir;    // the drafter folder, MODEL/drafters/<name>
  HttpOptions http;
};

struct DrafterInstallReport {
  std::string commit;
  uint64_t local_bytes = 0;       // model.safetensors and the small files
  uint64_t skipped_bytes = 0;     // DSpark: the embedding's bytes, never requested
  uint64_t downloaded_bytes = 0;  // this run
  double seconds = 0;
};

// Both resume an interrupted run and skip what is complete. Throw base::Error naming the file.
DrafterInstallReport install_dspark(const DrafterInstallOptions& options);
DrafterInstallReport install_qwen(const DrafterInstallOptions& options);

}  // namespace deltafin::setup
