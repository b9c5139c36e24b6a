// `deltafin setup`: installs a model from an HF-style repository, either whole (--full: every
// shard, verified against its published sha256) or streaming (--stream: the spine now, experts on
// demand), choosing by free disk when not told.
#pragma once

#include <cstdint>
#include <string>

#include "setup/http.h"
#include "setup/install.h"
#include "setup/repo.h"

namespace deltafin::setup {

enum class InstallMode { kAuto, kFull, kStream };

struct SetupOptions {
  RemoteRepo remote;  // endpoint, repository, revision as asked for
  std::string dir;    // the install folder
  InstallMode mode = InstallMode::kAuto;
  int jobs = 4;      // parallel downloads (one connection each)
  HttpOptions http;  // token and retry policy; token_host defaults to the endpoint's host
};

struct SetupReport {
  InstallKind kind = InstallKind::kFull;
  std::string commit;
  std::string decision;  // why this kind, in words (the free space and the sizes)
  uint64_t downloaded_bytes = 0;
  uint64_t local_bytes = 0;  // what the install occupies
  uint64_t full_bytes = 0;   // what a full install occupies
  double seconds = 0;
};

// Runs the whole install; a rerun resumes where an interrupted one stopped and skips what is
// done. Throws base::Error with a message that names the file and what to do.
SetupReport run_setup(const SetupOptions& options);

}  // namespace deltafin::setup
