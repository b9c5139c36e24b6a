// HEAD metadata, header fetches, resumable verified downloads and the worker pool.
#include "setup/download.h"

#include <cctype>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "base/log.h"
#include "format/safetensors.h"
#include "setup/files.h"
#include "setup/progress.h"

namespace deltafin::setup {

using base::fail;
using base::str_cat;

namespace {

bool is_hex(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string lower_hex(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void hash_prefix(Digest& d, const std::string& path, uint64_t n_bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open ", path, ": ", std::strerror(errno));
  std::vector<char> buf(size_t{4} << 20);
  while (n_bytes > 0) {
    const size_t want = n_bytes < buf.size() ? static_cast<size_t>(n_bytes) : buf.size();
    const size_t got = std::fread(buf.data(), 1, want, f);
    if (got == 0) break;
    d.update(buf.data(), got);
    n_bytes -= got;
  }
  std::fclose(f);
  if (n_bytes != 0) fail("cannot read ", path, " back for hashing");
}

}  // namespace

RemoteMeta remote_meta(HttpClient& client, const std::string& url) {
  const HeadResult h = client.head(url);
  RemoteMeta m;
  m.commit = h.header("x-repo-commit").value_or("");
  const auto linked_size = h.header("x-linked-size");
  const auto content_length = h.header("content-length");
  if (linked_size)
    m.size = std::strtoull(linked_size->c_str(), nullptr, 10);
  else if (content_length && h.status >= 200 && h.status < 300)
    m.size = std::strtoull(content_length->c_str(), nullptr, 10);
  if (!m.commit.empty()) {
    const auto linked = h.header("x-linked-etag");
    const std::string etag = normalize_etag(linked ? *linked : h.header("etag").value_or(""));
    if (is_hex(etag, 64)) {
      m.digest_kind = DigestKind::kSha256;
      m.digest = lower_hex(etag);
    } else if (!linked && is_hex(etag, 40)) {
      m.digest_kind = DigestKind::kGitBlobSha1;
      m.digest = lower_hex(etag);
    }
  }
  return m;
}

ShardHeader fetch_shard_header(HttpClient& client, const std::string& url) {
  ShardHeader h;
  std::string first;
  uint64_t total = 0;
  client.get_range(
      url, 0, 8, [&](const char* p, size_t n) { first.append(p, n); }, &total);
  uint64_t len = 0;
  std::memcpy(&len, first.data(), 8);  // little-endian on every platform deltafin builds for
  if (len == 0 || len > format::kMaxHeaderBytes || total < 8 + len) {
    fail(url_for_messages(url), ": not a safetensors file (header length ", len, ", file size ",
         total, ")");
  }
  h.file_size = total;
  h.prefix = first;
  h.prefix.reserve(8 + len);
  client.get_range(url, 8, len, [&](const char* p, size_t n) { h.prefix.append(p, n); });
  return h;
}

uint64_t local_progress(const std::string& dest, uint64_t size) {
  if (auto s = file_size(dest); s && *s == size) return size;
  if (auto s = file_size(dest + ".partial"); s && *s <= size) return *s;
  return 0;
}

void resumable_transfer(PartialFile& part, const std::string& dest,
                        const std::function<void()>& transfer) {
  try {
    transfer();
  } catch (const HttpError&) {
    part.try_mark();
    throw;
  } catch (const base::Error& e) {
    part.try_mark();
    fail(e.what(), " (", human_bytes(free_bytes(parent_dir(dest))),
         " free there; the partial download is kept and a rerun resumes it)");
  } catch (...) {
    part.try_mark();
    throw;
  }
}

uint64_t download_file(HttpClient& client, const std::string& url, const std::string& dest,
                       uint64_t size, const ExpectedDigest& digest, Progress* progress,
                       const std::atomic<bool>* stop) {
  if (auto s = file_size(dest); s && *s == size) return 0;
  uint64_t transferred = 0;
  for (int round = 0;; ++round) {
    PartialFile part(dest, size);
    const uint64_t start = part.size();
    if (start > 0) base::log_info("resuming ", dest, " from byte ", start);
    std::optional<Digest> d;
    if (!digest.hex.empty()) {
      d.emplace(digest.kind, size);
      hash_prefix(*d, part.path(), start);
    }
    if (progress) progress->add(start);
    resumable_transfer(part, dest, [&] {
      client.get_range(url, start, size - start, [&](const char* p, size_t n) {
        if (stop && stop->load(std::memory_order_relaxed)) throw Cancelled();
        part.write(p, n);
        if (d) d->update(p, n);
        if (progress) progress->add(n);
        transferred += n;
      });
    });
    if (d) {
      const std::string got = d->hex_final();
      if (got != digest.hex) {
        part.discard();
        if (progress) progress->add_total(size);  // the bytes come again
        if (round == 0) {
          base::log_warn(dest, ": ", digest_name(digest.kind), " is ", got, ", expected ",
                         digest.hex, "; downloading it again from the start");
          continue;
        }
        fail(dest, ": ", digest_name(digest.kind), " of the downloaded file is ", got,
             ", expected ", digest.hex, " (twice); the download was deleted");
      }
    }
    part.publish(size);
    return transferred;
  }
}

void run_parallel(size_t n, int jobs, const HttpOptions& options, HttpStats* stats,
                  RedirectCache* redirects, std::atomic<bool>* stop,
                  const std::function<void(size_t, HttpClient&)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr first_error;
  auto worker = [&] {
    HttpClient client(options, stats, redirects);
    while (!stop->load()) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        fn(i, client);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first_error) first_error = std::current_exception();
        stop->store(true);
      }
    }
  };
  const size_t n_threads = std::min<size_t>(n, static_cast<size_t>(std::max(1, jobs)));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n_threads; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace deltafin::setup
