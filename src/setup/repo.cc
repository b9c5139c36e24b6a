// Remote repository identity, pinned K3 facts and the default install location.
#include "setup/repo.h"

#include <cctype>
#include <cstdlib>

#include "base/error.h"
#include "setup/files.h"
#include "setup/http.h"

namespace deltafin::setup {

namespace {

// Sizes and sha256 of K3's small files at the pinned revision (spec/kimi-k3.md; the hashes are
// the ones gavamedia/deltafin's k3_source.rs pins for the same commit).
const PinnedFile kKimiK3Pinned[] = {
    {"LICENSE", 3065, "20c797ce19af0c17de52c6afb144644768a591c521655f5ebf5712c9850f2887"},
    {"config.json", 7006, "9710e121a58d03ac92c8d6da287a19541994319afbbe6d6202af001ffd379213"},
    {"generation_config.json", 53,
     "c6648c25e9705af7fba8847e243840d21b5cc63ddeb6297f750a7ddbb6a02836"},
    {"tokenizer_config.json", 3478,
     "5d0803c94db9cd78763499e0956c95fd5a225c14a727e5a6cf5db3f96f010a6e"},
    {"tiktoken.model", 2795286, "b6c497a7469b33ced9c38afb1ad6e47f03f5e5dc05f15930799210ec050c5103"},
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

std::vector<PinnedFile> pinned_files(const std::string& repo, const std::string& revision) {
  if (repo == kDefaultRepo && revision == kKimiK3Revision)
    return std::vector<PinnedFile>(std::begin(kKimiK3Pinned), std::end(kKimiK3Pinned));
  return {};
}

std::string default_revision(const std::string& repo) {
  return repo == kDefaultRepo ? kKimiK3Revision : "main";
}

std::string default_endpoint() {
  std::string e = env_or("HF_ENDPOINT", kDefaultEndpoint);
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string default_model_dir(const std::string& repo) {
  std::string base = env_or("DELTAFIN_HOME", "");
  if (base.empty()) {
    const std::string xdg = env_or("XDG_DATA_HOME", "");
    if (!xdg.empty()) {
      base = join_path(xdg, "deltafin");
    } else {
      const std::string home = env_or("HOME", "");
      if (home.empty()) base::fail("cannot find a default model folder: set DELTAFIN_HOME or HOME");
      base = join_path(home, ".local/share/deltafin");
    }
  }
  return join_path(join_path(base, "models"), repo);
}

std::string RemoteRepo::file_url(const std::string& file) const {
  return endpoint + "/" + repo + "/resolve/" + revision + "/" + file;
}

std::string RemoteRepo::host() const { return url_host(endpoint); }

void check_repo_id(const std::string& repo) {
  const size_t slash = repo.find('/');
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < repo.size() &&
            repo.find('/', slash + 1) == std::string::npos;
  for (char c : repo) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '-' || c == '_' ||
          c == '.'))
      ok = false;
  }
  if (repo.find("..") != std::string::npos) ok = false;
  if (!ok) base::fail("--repo '", repo, "' is not a repository id of the form owner/name");
}

void check_remote_file_name(const std::string& name, const std::string& where) {
  bool ok = !name.empty() && name != "." && name != ".." && name[0] != '.';
  for (char c : name) {
    if (c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20) ok = false;
  }
  if (!ok) base::fail(where, ": '", name, "' is not a plain file name");
}

}  // namespace deltafin::setup
