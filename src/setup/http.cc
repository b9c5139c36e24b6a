// libcurl transfers with answer checking, resumption and backoff (see http.h).
#include "setup/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <thread>

#include "base/log.h"

namespace deltafin::setup {

using base::str_cat;

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0) base::fail("environment variable ", name, "='", v, "' is not a count");
  return n;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool retryable_status(long status) { return status >= 500 || status == 429 || status == 408; }

// Parses one header line into `headers`; a status line starts a new response (redirects and
// "100 Continue" come before the answer that counts).
void take_header_line(std::string_view line, long* status,
                      std::map<std::string, std::string>* headers) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.rfind("HTTP/", 0) == 0) {
    headers->clear();
    const size_t sp = line.find(' ');
    *status =
        sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1)).c_str());
    return;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return;
  (*headers)[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
}

long retry_after_ms(const std::map<std::string, std::string>& headers) {
  auto it = headers.find("retry-after");
  if (it == headers.end()) return 0;
  char* end = nullptr;
  const long s = std::strtol(it->second.c_str(), &end, 10);
  return (*end == '\0' && s >= 0) ? s * 1000 : 0;
}

// The message for a final or transient HTTP status, with what the user can do about it.
std::string status_message(long status, const std::map<std::string, std::string>& headers,
                           const std::string& body, bool sent_token) {
  std::string code;
  if (auto it = headers.find("x-error-code"); it != headers.end()) code = it->second;
  std::string detail = trim(body.substr(0, 200));
  std::string hint;
  if (status == 401 || status == 403) {
    hint = sent_token ? "; the server refused HF_TOKEN (is it valid, and have you accepted the "
                        "model's license on its page?)"
                      : "; the repository needs a token: set HF_TOKEN (and accept the model's "
                        "license on its page)";
  } else if (status == 404 && code == "RevisionNotFound") {
    hint = "; the revision does not exist in this repository (check --revision)";
  } else if (status == 404 && code == "RepoNotFound") {
    hint = "; no such repository (check --repo, or set HF_TOKEN for a private one)";
  } else if (status == 404) {
    hint = "; the file is not in the repository at this revision";
  } else if (status == 416) {
    hint = "; the remote file is shorter than expected (did it change upstream?)";
  }
  return str_cat("HTTP ", status, code.empty() ? "" : " " + code,
                 detail.empty() ? "" : " (" + detail + ")", hint);
}

}  // namespace

void HttpOptions::apply_env() {
  max_attempts = static_cast<int>(std::max(1L, env_long("DELTAFIN_HTTP_ATTEMPTS", max_attempts)));
  backoff_initial_ms = env_long("DELTAFIN_HTTP_BACKOFF_MS", backoff_initial_ms);
  backoff_max_ms = std::max(backoff_initial_ms, backoff_max_ms);
  stall_seconds = std::max(1L, env_long("DELTAFIN_HTTP_STALL_S", stall_seconds));
  connect_timeout_ms = env_long("DELTAFIN_HTTP_CONNECT_TIMEOUT_MS", connect_timeout_ms);
}

std::optional<std::string> HeadResult::header(const std::string& lowercase_name) const {
  auto it = headers.find(lowercase_name);
  if (it == headers.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> RedirectCache::get(const std::string& url) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(url);
  if (it == entries_.end()) return std::nullopt;
  if (std::chrono::steady_clock::now() >= it->second.expires) {
    entries_.erase(it);
    return std::nullopt;
  }
  return it->second.target;
}

void RedirectCache::put(const std::string& url, const std::string& target) {
  std::lock_guard lock(mu_);
  entries_[url] = Entry{target, std::chrono::steady_clock::now() + ttl_};
}

void RedirectCache::drop(const std::string& url) {
  std::lock_guard lock(mu_);
  entries_.erase(url);
}

std::optional<ContentRange> parse_content_range(std::string_view v) {
  const std::string s = trim(v);
  if (s.rfind("bytes ", 0) != 0) return std::nullopt;
  unsigned long long a = 0, b = 0, t = 0;
  char tail[4] = {};
  if (std::sscanf(s.c_str() + 6, "%llu-%llu/%llu", &a, &b, &t) == 3) {
    if (b < a || b >= t) return std::nullopt;
    return ContentRange{a, b, t};
  }
  if (std::sscanf(s.c_str() + 6, "%llu-%llu/%1[*]", &a, &b, tail) == 3 && b >= a)
    return ContentRange{a, b, std::nullopt};
  return std::nullopt;
}

std::string normalize_etag(std::string_view etag) {
  std::string s = trim(etag);
  if (s.rfind("W/", 0) == 0) s = s.substr(2);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

std::string url_host(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return "";
  const size_t start = scheme + 3;
  const size_t end = url.find_first_of("/?#", start);
  std::string host(url.substr(start, end == std::string_view::npos ? url.npos : end - start));
  if (const size_t at = host.rfind('@'); at != std::string::npos) host = host.substr(at + 1);
  return lower(host);
}

std::string url_for_messages(std::string_view url) {
  return std::string(url.substr(0, url.find('?')));
}

// The state of one request while curl runs it.
struct HttpClient::Attempt {
  HttpClient* client = nullptr;
  const Sink* sink = nullptr;
  uint64_t offset = 0, length = 0;  // what this request asked for
  uint64_t delivered = 0;
  long status = 0;
  std::map<std::string, std::string> headers;
  bool checked = false;
  uint64_t total_size = 0;  // of the whole file, from Content-Range
  std::string error;        // set by the body check; the transfer is aborted
  bool error_retryable = false;
  std::string error_body;  // the start of a non-2xx answer's body, for the message
  std::exception_ptr sink_error;

  // Decides, at the first body byte, whether this answer is the range that was asked for.
  void check() {
    checked = true;
    if (status < 200 || status >= 300) return;  // handled after the transfer, body kept for text
    auto cl = headers.find("content-length");
    const bool has_length = cl != headers.end();
    const uint64_t content_length = has_length ? std::strtoull(cl->second.c_str(), nullptr, 10) : 0;
    if (status == 206) {
      auto cr = headers.find("content-range");
      const auto range = cr == headers.end() ? std::nullopt : parse_content_range(cr->second);
      if (!range || range->first != offset || range->last != offset + length - 1) {
        error =
            str_cat("asked for bytes ", offset, "-", offset + length - 1, ", the server answered ",
                    cr == headers.end() ? "without Content-Range" : "Content-Range: " + cr->second);
        error_retryable = true;
      } else if (has_length && content_length != length) {
        error = str_cat("the server declared Content-Length ", content_length, " for a range of ",
                        length, " bytes");
        error_retryable = true;
      }
      if (range && range->total) total_size = *range->total;
      return;
    }
    if (status == 200 && offset == 0 && (!has_length || content_length == length)) {
      total_size = length;
      return;
    }
    if (status == 200) {
      error =
          "the server ignored the Range header (HTTP 200 with the whole file); downloads need a "
          "server that supports range requests";
    } else {
      error = str_cat("unexpected HTTP ", status, " for a range request");
    }
    error_retryable = false;
  }

  static size_t on_header(char* buf, size_t size, size_t n, void* p) {
    auto* a = static_cast<Attempt*>(p);
    take_header_line(std::string_view(buf, size * n), &a->status, &a->headers);
    return size * n;
  }

  static size_t on_body(char* buf, size_t size, size_t n, void* p) {
    auto* a = static_cast<Attempt*>(p);
    const size_t total = size * n;
    if (!a->checked) a->check();
    if (a->status < 200 || a->status >= 300) {
      // Keep a short error body for the message; a long one is not worth the connection.
      if (a->error_body.size() < 512) a->error_body.append(buf, std::min<size_t>(total, 512));
      return a->error_body.size() < 65536 ? total : 0;
    }
    if (!a->error.empty()) return 0;
    if (a->delivered + total > a->length) {
      a->error = str_cat("the server sent more than the ", a->length, " bytes asked for");
      a->error_retryable = true;
      return 0;
    }
    try {
      (*a->sink)(buf, total);
    } catch (...) {
      a->sink_error = std::current_exception();
      return 0;
    }
    a->delivered += total;
    if (a->client->stats_) a->client->stats_->bytes += total;
    return total;
  }
};

HttpClient::HttpClient(HttpOptions options, HttpStats* stats, RedirectCache* redirects)
    : options_(std::move(options)), stats_(stats), redirects_(redirects) {
  global_init();
  curl_ = curl_easy_init();
  if (!curl_) base::fail("libcurl could not create a handle");
}

HttpClient::~HttpClient() {
  curl_slist_free_all(static_cast<curl_slist*>(header_list_));
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

void HttpClient::prepare(const std::string& url) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);  // keeps the live connection for the next request
  curl_slist_free_all(static_cast<curl_slist*>(header_list_));
  curl_slist* list = nullptr;
  if (!options_.token.empty() && url_host(url) == lower(options_.token_host)) {
    list = curl_slist_append(list, ("Authorization: Bearer " + options_.token).c_str());
  }
  list = curl_slist_append(list, "Accept-Encoding: identity");
  header_list_ = list;
  error_buffer_[0] = '\0';
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "deltafin/" DELTAFIN_VERSION);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error_buffer_);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, options_.connect_timeout_ms);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options_.stall_seconds);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  if (options_.cancel) {
    // libcurl calls this at least once a second, even on a stalled connection.
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, options_.cancel);
    curl_easy_setopt(
        c, CURLOPT_XFERINFOFUNCTION,
        +[](void* p, curl_off_t, curl_off_t, curl_off_t, curl_off_t) -> int {
          return static_cast<const std::atomic<bool>*>(p)->load() ? 1 : 0;
        });
  }
  if (stats_) stats_->requests++;
}

void HttpClient::check_cancel(const std::string& what) const {
  if (cancelled()) throw HttpError(what + ": cancelled (shutting down)", false, 0);
}

void HttpClient::backoff_sleep(long ms, const std::string& what) const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    check_cancel(what);
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
}

long HttpClient::backoff_ms(int failures, const HttpError& e) const {
  long delay = options_.backoff_initial_ms;
  for (int i = 1; i < failures && delay < options_.backoff_max_ms; ++i) delay *= 2;
  delay = std::min(delay, options_.backoff_max_ms);
  thread_local std::minstd_rand rng(std::random_device{}());
  delay = delay / 2 + static_cast<long>(rng() % static_cast<unsigned long>(delay / 2 + 1));
  if (e.retry_after_ms() > 0)
    delay = std::min(std::max(delay, e.retry_after_ms()), options_.backoff_max_ms);
  return delay;
}

void HttpClient::perform_range(const std::string& target, uint64_t offset, uint64_t length,
                               const Sink& sink, uint64_t* delivered, std::string* effective_url,
                               uint64_t* total_size) {
  CURL* c = static_cast<CURL*>(curl_);
  prepare(target);
  Attempt a;
  a.client = this;
  a.sink = &sink;
  a.offset = offset;
  a.length = length;
  const std::string range = str_cat(offset, "-", offset + length - 1);
  curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &Attempt::on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Attempt::on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
  const CURLcode rc = curl_easy_perform(c);
  *delivered += a.delivered;
  if (a.sink_error) std::rethrow_exception(a.sink_error);
  const std::string what = str_cat("GET ", url_for_messages(target), " bytes ", range, ": ");
  if (!a.error.empty()) throw HttpError(what + a.error, a.error_retryable, a.status);
  // A redirect's status stays in `a.status` when the connection to its target fails, so only
  // statuses >= 400 are the server's answer here; the rest is the transport's error.
  if (a.status >= 400) {
    throw HttpError(
        what + status_message(a.status, a.headers, a.error_body, !options_.token.empty()),
        retryable_status(a.status), a.status, retry_after_ms(a.headers));
  }
  if (rc != CURLE_OK) {
    const std::string detail = error_buffer_[0] ? error_buffer_ : curl_easy_strerror(rc);
    const bool retry = rc != CURLE_UNSUPPORTED_PROTOCOL && rc != CURLE_URL_MALFORMAT &&
                       rc != CURLE_TOO_MANY_REDIRECTS;
    throw HttpError(str_cat(what, detail, " after ", a.delivered, " of ", length, " bytes"), retry,
                    a.status);
  }
  if (a.status < 200 || a.status >= 300)
    throw HttpError(str_cat(what, "unexpected HTTP ", a.status), false, a.status);
  if (!a.checked) a.check();  // an empty body still has to be the right answer
  if (!a.error.empty()) throw HttpError(what + a.error, a.error_retryable, a.status);
  if (a.delivered != length) {
    throw HttpError(str_cat(what, "the answer ended after ", a.delivered, " of ", length, " bytes"),
                    true, a.status);
  }
  char* eff = nullptr;
  curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff);
  if (eff) *effective_url = eff;
  if (total_size) *total_size = a.total_size;
}

void HttpClient::get_range(const std::string& url, uint64_t offset, uint64_t length,
                           const Sink& sink, uint64_t* total_size) {
  if (length == 0) return;
  std::string target = url;
  bool via_cache = false;
  if (redirects_) {
    if (auto cached = redirects_->get(url)) {
      target = *cached;
      via_cache = true;
    }
  }
  uint64_t done = 0;
  int failures = 0, attempts = 0;
  const int max_total = options_.max_attempts * 16;  // progress resets `failures`; this bounds it
  while (true) {
    const uint64_t before = done;
    std::string effective;
    check_cancel(str_cat("GET ", url_for_messages(url)));
    try {
      ++attempts;
      perform_range(target, offset + done, length - done, sink, &done, &effective, total_size);
      if (redirects_ && !via_cache && !effective.empty() && effective != url)
        redirects_->put(url, effective);
      return;
    } catch (const HttpError& e) {
      check_cancel(e.what());  // an aborted transfer is not a failure to retry
      if (via_cache) {  // the signed target may have expired: go back to the origin once, at once
        base::log_warn(e.what(), "; retrying through ", url_for_messages(url));
        if (stats_) stats_->retries++;
        redirects_->drop(url);
        target = url;
        via_cache = false;
        continue;
      }
      if (!e.retryable()) throw;
      failures = done > before ? 1 : failures + 1;
      if (failures >= options_.max_attempts || attempts >= max_total) {
        throw HttpError(str_cat(e.what(), " (gave up after ", attempts, " attempts)"), false,
                        e.status());
      }
      const long delay = backoff_ms(failures, e);
      base::log_warn(e.what(), "; retrying in ", delay, " ms");
      if (stats_) stats_->retries++;
      backoff_sleep(delay, e.what());
    }
  }
}

HeadResult HttpClient::head_once(const std::string& url) {
  CURL* c = static_cast<CURL*>(curl_);
  HeadResult r;
  r.url = url;
  for (int hop = 0; hop < 6; ++hop) {
    prepare(r.url);
    long status = 0;
    std::map<std::string, std::string> headers;
    struct Ctx {
      long* status;
      std::map<std::string, std::string>* headers;
    } ctx{&status, &headers};
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(
        c, CURLOPT_HEADERFUNCTION, +[](char* buf, size_t size, size_t n, void* p) -> size_t {
          auto* x = static_cast<Ctx*>(p);
          take_header_line(std::string_view(buf, size * n), x->status, x->headers);
          return size * n;
        });
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &ctx);
    const CURLcode rc = curl_easy_perform(c);
    const std::string what = str_cat("HEAD ", url_for_messages(r.url), ": ");
    if (rc != CURLE_OK) {
      throw HttpError(what + (error_buffer_[0] ? error_buffer_ : curl_easy_strerror(rc)),
                      rc != CURLE_UNSUPPORTED_PROTOCOL && rc != CURLE_URL_MALFORMAT, 0);
    }
    r.status = status;
    r.headers = std::move(headers);
    const auto location = r.header("location");
    if (status >= 300 && status < 400 && location && !location->empty() && (*location)[0] == '/' &&
        (location->size() < 2 || (*location)[1] != '/')) {
      // A relative redirect stays on the endpoint (HF uses them for renamed repositories).
      const size_t scheme = r.url.find("://");
      const size_t path = r.url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
      r.url = r.url.substr(0, path) + *location;
      continue;
    }
    if (status >= 200 && status < 400) return r;
    throw HttpError(what + status_message(status, r.headers, "", !options_.token.empty()),
                    retryable_status(status), status, retry_after_ms(r.headers));
  }
  throw HttpError(str_cat("HEAD ", url_for_messages(url), ": too many redirects"), false, 0);
}

HeadResult HttpClient::head(const std::string& url) {
  for (int failures = 1;; ++failures) {
    check_cancel(str_cat("HEAD ", url_for_messages(url)));
    try {
      return head_once(url);
    } catch (const HttpError& e) {
      check_cancel(e.what());
      if (!e.retryable()) throw;
      if (failures >= options_.max_attempts)
        throw HttpError(str_cat(e.what(), " (gave up after ", failures, " attempts)"), false,
                        e.status());
      const long delay = backoff_ms(failures, e);
      base::log_warn(e.what(), "; retrying in ", delay, " ms");
      if (stats_) stats_->retries++;
      backoff_sleep(delay, e.what());
    }
  }
}

}  // namespace deltafin::setup
