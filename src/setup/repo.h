// Which remote repository an install comes from: endpoint, repository id and revision, the URLs
// of its files (HF's /{repo}/resolve/{revision}/{file}), what deltafin pins for Kimi K3, and where
// installs live by default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deltafin::setup {

inline constexpr const char* kDefaultRepo = "moonshotai/Kimi-K3";
// The revision deltafin pins for Kimi K3 (spec/kimi-k3.md): a full commit hash, so an install
// never changes under the user.
inline constexpr const char* kKimiK3Revision = "c5d1dd4c428bd1ce8b88c5044f3b6ccde9e3b721";
inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

// A small file whose size and sha256 deltafin knows in advance for a pinned revision.
struct PinnedFile {
  const char* name;
  uint64_t size;
  const char* sha256;
};
// The pinned files of `repo` at `revision` (empty when nothing is pinned for them).
std::vector<PinnedFile> pinned_files(const std::string& repo, const std::string& revision);
// The pinned revision for `repo`, or "main".
std::string default_revision(const std::string& repo);

// $HF_ENDPOINT, else https://huggingface.co (without a trailing slash).
std::string default_endpoint();

// Where `deltafin setup` installs `repo` and where `deltafin run` looks by default:
// $DELTAFIN_HOME/models/<owner>/<name>, else $XDG_DATA_HOME/deltafin/models/..., else
// ~/.local/share/deltafin/models/...
std::string default_model_dir(const std::string& repo = kDefaultRepo);

struct RemoteRepo {
  std::string endpoint;  // "https://huggingface.co"
  std::string repo;      // "moonshotai/Kimi-K3"
  std::string
      revision;  // a branch, tag or commit; setup replaces it with the commit it resolves to

  std::string file_url(const std::string& file) const;
  std::string host() const;  // "huggingface.co": where HF_TOKEN may be sent
};

// Throws base::Error unless `repo` is "owner/name" with characters HF allows.
void check_repo_id(const std::string& repo);
// Throws unless `name` is a plain file name (no folder, no "..", no control characters): file
// names come from the remote index and must never reach outside the install folder.
void check_remote_file_name(const std::string& name, const std::string& where);

}  // namespace deltafin::setup
