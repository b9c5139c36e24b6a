// On-demand expert fetching, the expert locator and the pool status (see expert_source.h).
#include "setup/expert_source.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "base/log.h"
#include "format/checkpoint.h"
#include "format/config.h"
#include "format/inventory.h"
#include "setup/files.h"
#include "setup/repo.h"

namespace deltafin::setup {

using base::fail;
using base::str_cat;

ExpertManifest load_expert_manifest(const std::string& dir) {
  const std::string path = join_path(dir, kExpertManifest);
  if (!file_size(path))
    fail(dir, ": streaming install without its expert manifest ", path, "; rerun deltafin setup");
  return ExpertManifest::parse(read_small_file(path), path);
}

namespace {

// "E0017.bin" -> 17; -1 for anything else (temporary files included).
int64_t cache_file_expert(const std::string& name) {
  if (name.size() < 6 || name[0] != 'E' || name.compare(name.size() - 4, 4, ".bin") != 0) return -1;
  int64_t e = 0;
  for (size_t i = 1; i + 4 < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    e = e * 10 + (name[i] - '0');
  }
  return e;
}

// Lists a layer's cache folder: the experts present, and temporary files of dead processes
// removed ("E0017.bin.tmp-<pid>-<n>": a killed fetch; a live process may still be writing one).
std::vector<int64_t> scan_layer(const std::string& layer_dir, bool clean) {
  std::vector<int64_t> present;
  DIR* d = ::opendir(layer_dir.c_str());
  if (!d) return present;
  while (dirent* ent = ::readdir(d)) {
    const std::string n = ent->d_name;
    const int64_t e = cache_file_expert(n);
    if (e >= 0) {
      present.push_back(e);
      continue;
    }
    const size_t tmp = n.find(".tmp-");
    if (!clean || tmp == std::string::npos) continue;
    const long pid = std::strtol(n.c_str() + tmp + 5, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      base::log_info("expert cache: removing ", n, ", left by a process that no longer runs");
      remove_file(join_path(layer_dir, n));
    }
  }
  ::closedir(d);
  return present;
}

}  // namespace

std::unique_ptr<RemoteExpertSource> RemoteExpertSource::open(const std::string& model_dir,
                                                             ExpertSourceOptions options) {
  const auto record = read_install(model_dir);
  if (!record || record->kind != InstallKind::kStream)
    fail(model_dir, " is not a streaming install (no .deltafin/install.json of kind stream)");
  ExpertManifest manifest = load_expert_manifest(model_dir);
  for (const ExpertLayer& l : manifest.layers) {
    scan_layer(parent_dir(join_path(model_dir, expert_cache_relpath(l.layer, 0))), /*clean=*/true);
  }
  return std::unique_ptr<RemoteExpertSource>(
      new RemoteExpertSource(model_dir, *record, std::move(manifest), std::move(options)));
}

RemoteExpertSource::RemoteExpertSource(std::string dir, InstallRecord record,
                                       ExpertManifest manifest, ExpertSourceOptions options)
    : dir_(std::move(dir)),
      record_(std::move(record)),
      manifest_(std::move(manifest)),
      options_(std::move(options)) {
  endpoint_ = !options_.endpoint.empty()   ? options_.endpoint
              : std::getenv("HF_ENDPOINT") ? default_endpoint()
                                           : record_.endpoint;
  if (options_.http.token.empty()) {
    if (const char* t = std::getenv("HF_TOKEN")) options_.http.token = t;
  }
  if (options_.http.token_host.empty()) options_.http.token_host = url_host(endpoint_);
  options_.http.cancel = &cancel_;
  const int n = std::max(1, options_.n_connections);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { worker(); });
}

RemoteExpertSource::~RemoteExpertSource() {
  std::deque<Key> dropped;
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    dropped.swap(queue_);
  }
  cancel_ = true;
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (const Key& k : dropped) {
    auto it = pending_.find(k);
    if (it == pending_.end()) continue;
    const std::exception_ptr closed = std::make_exception_ptr(base::Error(
        str_cat("layer ", k.first, " expert ", k.second, ": the expert source was closed")));
    it->second->promise.set_exception(closed);
    for (FetchDone& done : it->second->callbacks) done(closed);
  }
}

const ExpertLayer& RemoteExpertSource::layer_of(int64_t layer, int64_t expert) const {
  const ExpertLayer* l = manifest_.find_layer(layer);
  if (!l) fail(dir_, ": layer ", layer, " has no routed experts");
  if (expert < 0 || expert >= l->n_experts())
    fail(dir_, ": layer ", layer, " has experts 0..", l->n_experts() - 1, ", not ", expert);
  return *l;
}

std::string RemoteExpertSource::cache_path(int64_t layer, int64_t expert) const {
  return join_path(dir_, expert_cache_relpath(layer, expert));
}

std::optional<ExpertBytes> RemoteExpertSource::find_local(int64_t layer, int64_t expert) const {
  const ExpertLayer& l = layer_of(layer, expert);
  const std::string path = cache_path(layer, expert);
  const auto size = file_size(path);
  if (!size || *size != l.span_bytes) return std::nullopt;
  return ExpertBytes{path, 0, l.span_bytes};
}

std::shared_future<ExpertBytes> RemoteExpertSource::fetch_async(int64_t layer, int64_t expert) {
  if (auto local = find_local(layer, expert)) {
    std::promise<ExpertBytes> ready;
    ready.set_value(*local);
    return ready.get_future().share();
  }
  std::lock_guard lock(mu_);
  return pending_for({layer, expert})->future;
}

std::shared_ptr<RemoteExpertSource::Pending> RemoteExpertSource::pending_for(const Key& key) {
  if (auto it = pending_.find(key); it != pending_.end()) return it->second;
  if (closing_) fail("layer ", key.first, " expert ", key.second, ": the expert source is closing");
  auto p = std::make_shared<Pending>();
  p->future = p->promise.get_future().share();
  pending_.emplace(key, p);
  queue_.push_back(key);
  cv_.notify_one();
  return p;
}

void RemoteExpertSource::fetch_then(int64_t layer, int64_t expert, FetchDone done) {
  layer_of(layer, expert);  // a bad id fails here, in the caller's thread
  std::lock_guard lock(mu_);
  pending_for({layer, expert})->callbacks.push_back(std::move(done));
}

ExpertBytes RemoteExpertSource::ensure_local(int64_t layer, int64_t expert) {
  return fetch_async(layer, expert).get();
}

RemoteExpertSource::Stats RemoteExpertSource::stats() const {
  return Stats{fetched_.load(), http_stats_.bytes.load(), http_stats_.requests.load(),
               http_stats_.retries.load()};
}

void RemoteExpertSource::worker() {
  HttpClient client(options_.http, &http_stats_, &redirects_);
  while (true) {
    Key key;
    std::shared_ptr<Pending> p;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
      if (closing_) return;  // queued requests are failed by the destructor
      key = queue_.front();
      queue_.pop_front();
      p = pending_.at(key);
    }
    std::exception_ptr error;
    ExpertBytes bytes;
    try {
      bytes = fetch_one(client, key.first, key.second);
    } catch (...) {
      error = std::current_exception();
    }
    std::vector<FetchDone> callbacks;
    {
      std::lock_guard lock(mu_);
      pending_.erase(key);
      callbacks.swap(p->callbacks);  // later fetch_then calls start a new entry
    }
    if (error)
      p->promise.set_exception(error);
    else
      p->promise.set_value(bytes);
    for (FetchDone& done : callbacks) done(error);
  }
}

ExpertBytes RemoteExpertSource::fetch_one(HttpClient& client, int64_t layer, int64_t expert) {
  if (auto local = find_local(layer, expert)) return *local;  // another process may have fetched it
  const ExpertLayer& l = layer_of(layer, expert);
  const RemoteFile& file = manifest_.files[l.file[static_cast<size_t>(expert)]];
  const uint64_t offset = l.offset[static_cast<size_t>(expert)];
  const std::string path = cache_path(layer, expert);
  const std::string tmp = str_cat(path, ".tmp-", ::getpid(), "-", tmp_counter_.fetch_add(1));
  const std::string what = str_cat("layer ", layer, " expert ", expert, " (", l.span_bytes,
                                   " bytes of ", file.name, " at byte ", offset, ")");
  try {
    make_dirs(parent_dir(path));
    OutFile out(tmp, /*truncate=*/true);
    const std::string url =
        endpoint_ + "/" + record_.repo + "/resolve/" + record_.commit + "/" + file.name;
    client.get_range(url, offset, l.span_bytes,
                     [&](const char* data, size_t n) { out.write(data, n); });
    out.close();
    // The span must be exactly what the header promised; get_range checked the range, this checks
    // nothing was lost between the socket and the disk.
    if (out.size() != l.span_bytes) fail("wrote ", out.size(), " bytes, expected ", l.span_bytes);
    publish_file(tmp, path);
  } catch (const HttpError& e) {
    ::unlink(tmp.c_str());
    fail("fetching ", what, ": ", e.what());
  } catch (const base::Error& e) {
    ::unlink(tmp.c_str());
    fail("fetching ", what, ": ", e.what(), " (", human_bytes(free_bytes(dir_)),
         " free for the expert cache at ", join_path(dir_, kExpertCacheDir), ")");
  }
  fetched_++;
  return ExpertBytes{path, 0, l.span_bytes};
}

ExpertLocator ExpertLocator::open(const std::string& model_dir) {
  ExpertLocator loc;
  loc.dir_ = model_dir;
  loc.streaming_ = is_streaming_install(model_dir);
  if (loc.streaming_) {
    loc.manifest_ = load_expert_manifest(model_dir);
    return loc;
  }
  const format::Checkpoint ckpt = format::Checkpoint::open(model_dir);
  const format::ModelConfig config = format::load_config(model_dir);
  for (const format::ExpertSpan& s : format::locate_experts(ckpt, config))
    loc.spans_[{s.layer, s.expert}] = ExpertBytes{s.file, s.offset, s.nbytes};
  return loc;
}

std::optional<ExpertBytes> ExpertLocator::find(int64_t layer, int64_t expert) const {
  if (!streaming_) {
    auto it = spans_.find({layer, expert});
    if (it == spans_.end()) return std::nullopt;
    return it->second;
  }
  const ExpertLayer* l = manifest_.find_layer(layer);
  if (!l || expert < 0 || expert >= l->n_experts()) return std::nullopt;
  const std::string path = join_path(dir_, expert_cache_relpath(layer, expert));
  const auto size = file_size(path);
  if (!size || *size != l->span_bytes) return std::nullopt;
  return ExpertBytes{path, 0, l->span_bytes};
}

ExpertPoolStatus expert_pool_status(const std::string& model_dir) {
  ExpertPoolStatus s;
  s.streaming = is_streaming_install(model_dir);
  if (!s.streaming) return s;
  const ExpertManifest m = load_expert_manifest(model_dir);
  for (const ExpertLayer& l : m.layers) {
    const std::string rel = expert_cache_relpath(l.layer, 0);
    const std::vector<int64_t> present =
        scan_layer(parent_dir(join_path(model_dir, rel)), /*clean=*/false);
    int64_t n_local = 0;
    for (int64_t e : present) n_local += e < l.n_experts();
    s.n_experts += l.n_experts();
    s.n_local += n_local;
    s.bytes_total += l.span_bytes * static_cast<uint64_t>(l.n_experts());
    s.bytes_missing += l.span_bytes * static_cast<uint64_t>(l.n_experts() - n_local);
  }
  return s;
}

std::optional<std::string> streaming_warning(const std::string& model_dir) {
  const ExpertPoolStatus s = expert_pool_status(model_dir);
  if (!s.streaming || s.n_local == s.n_experts) return std::nullopt;
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%",
                s.n_experts
                    ? 100.0 * static_cast<double>(s.n_local) / static_cast<double>(s.n_experts)
                    : 100.0);
  return str_cat(
      "streaming install: ", share, " of experts are local (", s.n_local, " of ", s.n_experts,
      "); ", human_bytes(s.bytes_missing),
      " are left to fetch over the network the first time a token needs them, which is much slower "
      "than disk. `deltafin fetch-experts --model ",
      model_dir, "` completes the pool.");
}

void warn_if_streaming(const std::string& model_dir) {
  if (auto w = streaming_warning(model_dir)) base::log_warn(*w);
}

}  // namespace deltafin::setup
