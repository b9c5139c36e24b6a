// Routed experts of a streaming install, fetched on demand: one HTTP range request per missing
// expert (its contiguous span), over a pool of keep-alive connections, stored verbatim as
// DIR/experts/L<layer>/E<expert>.bin and published atomically (temporary file, fsync, rename), so a
// cache file either is the whole expert or does not exist. Concurrent needs for the same expert
// share one request. Also: where any install's expert bytes are, and how complete the pool is.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "setup/expert_manifest.h"
#include "setup/http.h"
#include "setup/install.h"

namespace deltafin::setup {

// Where one expert's bytes are on local disk: `nbytes` bytes at `offset` of `path` (a shard of a
// full install, or a cache file of a streaming install, where offset is 0).
struct ExpertBytes {
  std::string path;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
};

struct ExpertSourceOptions {
  int n_connections = 4;  // fetch threads, one keep-alive connection each
  // Token and retry policy. When empty, token comes from HF_TOKEN; the endpoint is HF_ENDPOINT
  // when set, else the one the install came from.
  HttpOptions http;
  std::string endpoint;
};

// A streaming install's expert manifest (DIR/.deltafin/experts.json). Throws base::Error naming
// the file when it is missing or invalid.
ExpertManifest load_expert_manifest(const std::string& dir);

class RemoteExpertSource {
 public:
  // Opens a streaming install (throws base::Error for anything else) and removes temporary files
  // that killed processes left in its cache.
  static std::unique_ptr<RemoteExpertSource> open(const std::string& model_dir,
                                                  ExpertSourceOptions options = {});
  // Pending fetches fail with "closed"; running ones are cancelled (the transfer or backoff in
  // progress stops within about a second, leaves no file, and fails with "cancelled").
  ~RemoteExpertSource();
  RemoteExpertSource(const RemoteExpertSource&) = delete;
  RemoteExpertSource& operator=(const RemoteExpertSource&) = delete;

  const ExpertManifest& manifest() const { return manifest_; }
  const std::string& model_dir() const { return dir_; }

  // The cache file if the expert is local (complete: only whole files are ever published).
  std::optional<ExpertBytes> find_local(int64_t layer, int64_t expert) const;
  // Starts fetching the expert unless it is local or already on its way; the future yields its
  // cache file or rethrows the fetch's error (base::Error naming the expert and the cause).
  std::shared_future<ExpertBytes> fetch_async(int64_t layer, int64_t expert);
  // fetch_async(...).get()
  ExpertBytes ensure_local(int64_t layer, int64_t expert);
  // fetch_async with a callback instead of a future: `done` gets null once the expert is local,
  // else the fetch's error. It runs on a fetch thread (or in the destructor, for a fetch that
  // never started), never inside this call, even for an expert already local (a worker finds it
  // without a request): callers may hold their own locks while calling this.
  using FetchDone = std::function<void(std::exception_ptr error)>;
  void fetch_then(int64_t layer, int64_t expert, FetchDone done);

  struct Stats {
    uint64_t experts_fetched = 0;
    uint64_t bytes = 0;     // body bytes received, retries included
    uint64_t requests = 0;  // HTTP requests sent (redirects followed by curl count once)
    uint64_t retries = 0;
  };
  Stats stats() const;

 private:
  RemoteExpertSource(std::string dir, InstallRecord record, ExpertManifest manifest,
                     ExpertSourceOptions options);
  void worker();
  ExpertBytes fetch_one(HttpClient& client, int64_t layer, int64_t expert);
  const ExpertLayer& layer_of(int64_t layer, int64_t expert) const;
  std::string cache_path(int64_t layer, int64_t expert) const;

  std::string dir_;
  InstallRecord record_;
  ExpertManifest manifest_;
  ExpertSourceOptions options_;
  std::string endpoint_;
  HttpStats http_stats_;
  RedirectCache redirects_;
  std::atomic<uint64_t> fetched_{0};
  std::atomic<bool> cancel_{false};  // options_.http.cancel points here
  std::atomic<uint64_t> tmp_counter_{0};

  using Key = std::pair<int64_t, int64_t>;
  struct Pending {
    std::promise<ExpertBytes> promise;
    std::shared_future<ExpertBytes> future;
    std::vector<FetchDone> callbacks;  // fetch_then's, run after the promise is set
  };
  // The pending entry of `key`, queued for a worker if new. Caller holds mu_.
  std::shared_ptr<Pending> pending_for(const Key& key);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Key> queue_;
  std::map<Key, std::shared_ptr<Pending>> pending_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

// Where every routed expert's bytes are, for a full install (or any model folder) and a
// streaming one alike.
class ExpertLocator {
 public:
  static ExpertLocator open(const std::string& model_dir);
  bool streaming() const { return streaming_; }
  // nullopt: the expert is not local (streaming install) or the model has no such expert.
  std::optional<ExpertBytes> find(int64_t layer, int64_t expert) const;

 private:
  std::string dir_;
  bool streaming_ = false;
  ExpertManifest manifest_;                                   // streaming: layers and span sizes
  std::map<std::pair<int64_t, int64_t>, ExpertBytes> spans_;  // full: from the shards' headers
};

struct ExpertPoolStatus {
  bool streaming = false;
  int64_t n_experts = 0;
  int64_t n_local = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_missing = 0;
};
// Counts the cache (one directory listing per layer, no file reads). For a folder that is not a
// streaming install every expert counts as local.
ExpertPoolStatus expert_pool_status(const std::string& model_dir);

// For the CLI and the server at startup: in a streaming install with experts still remote, a
// warning with the share that is local and the size of what is left; nullopt otherwise.
std::optional<std::string> streaming_warning(const std::string& model_dir);
// Logs streaming_warning() (if any) at warning level.
void warn_if_streaming(const std::string& model_dir);

}  // namespace deltafin::setup
