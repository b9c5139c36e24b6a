// HTTP for downloads over libcurl: one easy handle per connection (kept alive between requests),
// HEAD that reads Hugging Face's file metadata, and range GETs that hand every byte to the sink
// exactly once and in order, resuming from the last byte received after a failure, with bounded
// exponential backoff. Errors a user must act on (401, 404, a server ignoring Range) are final.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"

namespace deltafin::setup {

struct HttpOptions {
  std::string token;       // HF_TOKEN, sent as "Authorization: Bearer" to token_host only
  std::string token_host;  // host[:port] of the endpoint; CDN hosts it redirects to never see it
  long connect_timeout_ms = 15000;
  long stall_seconds = 30;  // slower than 1 KiB/s for this long: the attempt is abandoned
  int max_attempts = 8;     // consecutive failures that made no progress before giving up
  long backoff_initial_ms = 500;
  long backoff_max_ms = 30000;
  // When set and true: the transfer in progress aborts within about a second, no retry or backoff
  // starts, and the call throws a non-retryable HttpError whose message says "cancelled". The
  // owner sets it when it shuts down, so a fetch stuck in retries does not hold the process.
  const std::atomic<bool>* cancel = nullptr;

  // Overrides from DELTAFIN_HTTP_ATTEMPTS, DELTAFIN_HTTP_BACKOFF_MS, DELTAFIN_HTTP_STALL_S and
  // DELTAFIN_HTTP_CONNECT_TIMEOUT_MS (tests and slow links use them).
  void apply_env();
};

class HttpError : public base::Error {
 public:
  HttpError(const std::string& message, bool retryable, long status, long retry_after_ms = 0)
      : base::Error(message),
        retryable_(retryable),
        status_(status),
        retry_after_ms_(retry_after_ms) {}
  bool retryable() const { return retryable_; }
  long status() const { return status_; }  // 0 when no HTTP answer came
  long retry_after_ms() const { return retry_after_ms_; }

 private:
  bool retryable_;
  long status_;
  long retry_after_ms_;
};

struct HeadResult {
  long status = 0;
  std::string url;                             // after following relative redirects
  std::map<std::string, std::string> headers;  // of the last response; names in lowercase
  std::optional<std::string> header(const std::string& lowercase_name) const;
};

// Counters shared by the connections of one pool.
struct HttpStats {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> retries{0};
};

// Where a URL last redirected to (HF sends each LFS download to a signed CDN URL). Reusing the
// target skips one round trip per request; entries expire, and a failure through one drops it.
class RedirectCache {
 public:
  explicit RedirectCache(std::chrono::seconds ttl = std::chrono::seconds(600)) : ttl_(ttl) {}
  std::optional<std::string> get(const std::string& url);
  void put(const std::string& url, const std::string& target);
  void drop(const std::string& url);

 private:
  struct Entry {
    std::string target;
    std::chrono::steady_clock::time_point expires;
  };
  std::chrono::seconds ttl_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

using Sink = std::function<void(const char* data, size_t n_bytes)>;

// One connection. Not thread-safe: give each thread its own.
class HttpClient {
 public:
  explicit HttpClient(HttpOptions options, HttpStats* stats = nullptr,
                      RedirectCache* redirects = nullptr);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // HEAD without following redirects to other hosts: HF's answer for an LFS file is a 302 that
  // carries X-Linked-Etag (the content's sha256) and X-Linked-Size. Relative redirects are
  // followed. Retries transient failures; throws HttpError for other non-2xx/3xx answers.
  HeadResult head(const std::string& url);

  // Streams bytes [offset, offset + length) of `url` to `sink`. Checks each answer (206 with the
  // Content-Range asked for and a matching Content-Length; a 200 only for a whole-file request),
  // retries transient failures from the first byte not yet delivered, and throws HttpError when
  // it gives up. Exceptions from the sink (a full disk) end the transfer at once, unchanged.
  // `total_size`, when given, receives the whole file's size from the last answer's
  // Content-Range (or Content-Length of a 200).
  void get_range(const std::string& url, uint64_t offset, uint64_t length, const Sink& sink,
                 uint64_t* total_size = nullptr);

  const HttpOptions& options() const { return options_; }

 private:
  struct Attempt;
  void perform_range(const std::string& target, uint64_t offset, uint64_t length, const Sink& sink,
                     uint64_t* delivered, std::string* effective_url, uint64_t* total_size);
  HeadResult head_once(const std::string& url);
  void prepare(const std::string& url);
  long backoff_ms(int failures, const HttpError& e) const;
  bool cancelled() const { return options_.cancel && options_.cancel->load(); }
  // Throws the cancellation error for `what` when cancelled().
  void check_cancel(const std::string& what) const;
  // Sleeps `ms` in short slices, returning early (by throwing) once cancelled.
  void backoff_sleep(long ms, const std::string& what) const;

  HttpOptions options_;
  HttpStats* stats_;
  RedirectCache* redirects_;
  void* curl_ = nullptr;         // CURL*
  void* header_list_ = nullptr;  // curl_slist* of the last request
  char error_buffer_[256] = {};
};

struct ContentRange {
  uint64_t first = 0, last = 0;   // inclusive
  std::optional<uint64_t> total;  // absent for "bytes a-b/*"
};
std::optional<ContentRange> parse_content_range(std::string_view value);
// Strips a weak-validator prefix and quotes: W/"abc" -> abc.
std::string normalize_etag(std::string_view etag);
// "https://host:port/path" -> "host:port"
std::string url_host(std::string_view url);
// The URL without its query string, for messages (signed CDN URLs are long and carry secrets).
std::string url_for_messages(std::string_view url);

}  // namespace deltafin::setup
