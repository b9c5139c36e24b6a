// Remote repository identity, pinned K3 facts and the default install location.
#include "setup/repo.h"

#include <cctype>
#include <cstdlib>

#include "base/error.h"
#include "setup/drafter_setup.h"
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

// Inferact/Kimi-K3-DSpark, Qwen3-0.6B-Base and Qwen3-1.7B-Base at the revisions
// setup/drafter_setup.h pins (spec/drafting.md §1.1, §2.1; the values gavamedia/deltafin pins).
const PinnedFile kDSparkPinned[] = {
    {"LICENSE", 3065, "20c797ce19af0c17de52c6afb144644768a591c521655f5ebf5712c9850f2887"},
    {"config.json", 1251, "5a3c2f4f91c965ed93b14de5f12a4e9c17fd98d8c99916ed2deb26ce8702f970"},
    {"model.safetensors", 7124633450,
     "f9972a636d92a11994cdcfc88fd4c5b5d50d6eb2a89af016031593b8c65c2053"},
};
// Both Qwen3 Base repositories share LICENSE and the tokenizer and generation files.
const PinnedFile kQwen06Pinned[] = {
    {"LICENSE", 11343, "832dd9e00a68dd83b3c3fb9f5588dad7dcf337a0db50f7d9483f310cd292e92e"},
    {"generation_config.json", 138,
     "8c970692323e3ea0e9b8b0a4dca79388d31226e41f83c9fd6014804280ebf6e8"},
    {"tokenizer.json", 7031645, "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"},
    {"tokenizer_config.json", 9678,
     "3c04ed3ca964ea2f6b2b5faf0dc4d31aec1cb1e8b4bcf63f402d295046b422b5"},
    {"config.json", 727, "504a6b58c4271583724e66584b6b7698aea18450209df6b2f7582df0e89cee59"},
    {"model.safetensors", 1192135096,
     "cd2a512003e2f9f3cd3c32a9c3573f820bb28c940f73c57b1ddaa983d9223eba"},
};
const PinnedFile kQwen17Pinned[] = {
    {"LICENSE", 11343, "832dd9e00a68dd83b3c3fb9f5588dad7dcf337a0db50f7d9483f310cd292e92e"},
    {"generation_config.json", 138,
     "8c970692323e3ea0e9b8b0a4dca79388d31226e41f83c9fd6014804280ebf6e8"},
    {"tokenizer.json", 7031645, "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"},
    {"tokenizer_config.json", 9678,
     "3c04ed3ca964ea2f6b2b5faf0dc4d31aec1cb1e8b4bcf63f402d295046b422b5"},
    {"config.json", 727, "1bb33a92c3548fbc68b889b490e810440435253598835bd71dff0396060c12db"},
    {"model.safetensors", 3441185608,
     "6df85b39330e5a425ee36253d0f894e4387e4f0a15b9c53cb467d668e6b3a841"},
};

struct PinnedRepo {
  const char* repo;
  const char* revision;
  const PinnedFile* begin;
  const PinnedFile* end;
};
const PinnedRepo kPinnedRepos[] = {
    {kDefaultRepo, kKimiK3Revision, std::begin(kKimiK3Pinned), std::end(kKimiK3Pinned)},
    {kDSparkRepo, kDSparkRevision, std::begin(kDSparkPinned), std::end(kDSparkPinned)},
    {kQwen06Repo, kQwen06Revision, std::begin(kQwen06Pinned), std::end(kQwen06Pinned)},
    {kQwen17Repo, kQwen17Revision, std::begin(kQwen17Pinned), std::end(kQwen17Pinned)},
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

std::vector<PinnedFile> pinned_files(const std::string& repo, const std::string& revision) {
  for (const PinnedRepo& p : kPinnedRepos)
    if (repo == p.repo && revision == p.revision) return std::vector<PinnedFile>(p.begin, p.end);
  return {};
}

std::string default_revision(const std::string& repo) {
  for (const PinnedRepo& p : kPinnedRepos)
    if (repo == p.repo) return p.revision;
  return "main";
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
