// HTTP/1.1 request parsing, body framing and the socket side of the server: reading with limits
// and timeouts, responses whole or streamed, and connection threads.
#include "server/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "server/api_error.h"

namespace deltafin::server {
namespace {

constexpr size_t kMaxHeaders = 128;
constexpr int kPollSliceMs = 200;  // how often blocked reads and writes see the stop flag
constexpr int kLingerMs = 2'000;   // reading (and discarding) after an early error reply
constexpr uint64_t kLingerBytes = 64 << 20;
constexpr int kEndingMs = 1'000;  // at shutdown, for the endings of cancelled requests
// A body at least this large is returned to the system when released: glibc keeps freed memory
// in its (per-thread) arenas otherwise, which is how 64 large bodies left 0.7 GB behind.
constexpr uint64_t kTrimBodyBytes = 1 << 20;
std::string too_many_connections() {
  return error_json(ApiError{
      503, "too many open connections; try again shortly (--max-connections)", "server_error"});
}

bool is_tchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("!#$%&'*+-.^_`|~", c);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether a comma-separated header value lists `token` (case-insensitive).
bool lists_token(const std::string* value, std::string_view token) {
  if (!value) return false;
  std::string_view rest = *value;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (lower(trim(rest.substr(0, comma))) == token) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

// Any number of digits: a value past 64 bits saturates, so that it is refused as too large (413)
// rather than as malformed.
bool parse_decimal(std::string_view s, uint64_t& out) {
  if (s.empty()) return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    out = out > (UINT64_MAX - d) / 10 ? UINT64_MAX : out * 10 + d;
  }
  return true;
}

// The bytes of blank lines (CRLF) before a request line, which RFC 9112 section 2.2 says a server
// should ignore: some clients send an extra CRLF after a body.
size_t leading_blank_lines(std::string_view data) {
  size_t n = 0;
  while (data.substr(n, 2) == "\r\n") n += 2;
  return n;
}

}  // namespace

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

HeadParse parse_request_head(std::string_view data, HttpRequest& out, size_t& head_bytes) {
  const size_t skipped = leading_blank_lines(data);
  data.remove_prefix(skipped);
  const size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos) return HeadParse::kIncomplete;
  head_bytes = skipped + end + 4;
  std::string_view head = data.substr(0, end + 2);  // every line keeps its CRLF
  const size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  head.remove_prefix(line_end + 2);

  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    throw HttpError{400, "malformed request line"};
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  // The absolute form ("http://host:port/path"), which a server must accept (RFC 9112 section
  // 3.2.2): its authority stands in for Host, the rest is the origin form.
  std::string_view authority;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && lower(target.substr(0, scheme.size())) == scheme) {
      target.remove_prefix(scheme.size());
      const size_t path_at = std::min(target.find('/'), target.find('?'));
      authority = target.substr(0, path_at);
      if (authority.empty()) throw HttpError{400, "the request target has no host"};
      target = path_at == std::string_view::npos ? "/" : target.substr(path_at);
      break;
    }
  }
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || method.size() > 16 || !std::all_of(method.begin(), method.end(), is_tchar))
    throw HttpError{400, "malformed request method"};
  if (target.empty() || target.front() != '/' || target.size() > 8192)
    throw HttpError{400, "the request target must be an absolute path"};
  for (std::string_view part : {authority, target})
    for (char c : part)
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
        throw HttpError{400, "control character in the request target"};
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1.")
    throw HttpError{version.substr(0, 5) == "HTTP/" ? 505 : 400, "unsupported HTTP version"};
  if (version[7] != '0' && version[7] != '1') throw HttpError{505, "unsupported HTTP version"};

  out.method = std::string(method);
  out.target.clear();
  if (target.front() == '?') out.target.push_back('/');  // "http://host?q"
  out.target.append(target);
  out.authority = std::string(authority);
  const std::string_view path = target.substr(0, target.find('?'));
  out.path = path.empty() ? std::string_view("/") : path;  // "http://host?q" has no path
  out.version_minor = version[7] - '0';
  out.headers.clear();
  out.body.clear();
  while (!head.empty()) {
    const size_t eol = head.find("\r\n");
    const std::string_view h = head.substr(0, eol);
    head.remove_prefix(eol + 2);
    if (h.empty() || h.front() == ' ' || h.front() == '\t')
      throw HttpError{400, "folded or empty header line"};
    const size_t colon = h.find(':');
    if (colon == 0 || colon == std::string_view::npos ||
        !std::all_of(h.begin(), h.begin() + colon, is_tchar))
      throw HttpError{400, "malformed header line"};
    const std::string_view value = trim(h.substr(colon + 1));
    for (char c : value)
      if (c == '\r' || c == '\n' || c == '\0') throw HttpError{400, "control character in header"};
    if (out.headers.size() == kMaxHeaders) throw HttpError{431, "too many header fields"};
    out.headers.emplace_back(lower(h.substr(0, colon)), std::string(value));
  }
  return HeadParse::kDone;
}

BodyFraming body_framing(const HttpRequest& head, uint64_t max_body_bytes) {
  BodyFraming f;
  bool have_length = false, have_coding = false;
  int n_chunked = 0;
  bool other_coding = false;
  for (const auto& [name, value] : head.headers) {
    if (name == "transfer-encoding") {
      // A list, possibly over several header lines; empty elements do not count (RFC 9110 5.6.1).
      std::string_view rest = value;
      bool any = false;
      while (true) {
        const size_t comma = rest.find(',');
        const std::string coding = lower(trim(rest.substr(0, comma)));
        if (!coding.empty()) {
          any = true;
          if (coding == "chunked")
            ++n_chunked;
          else
            other_coding = true;
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
      if (!any) throw HttpError{400, "empty Transfer-Encoding"};
      have_coding = true;
    } else if (name == "content-length") {
      uint64_t n = 0;
      if (!parse_decimal(value, n)) throw HttpError{400, "malformed Content-Length"};
      if (have_length && n != f.content_length) throw HttpError{400, "conflicting Content-Length"};
      have_length = true;
      f.content_length = n;
    }
  }
  // Chunked twice would need the body decoded twice (RFC 9112 section 6.1 forbids it).
  if (n_chunked > 1) throw HttpError{400, "the chunked transfer coding is applied more than once"};
  if (other_coding) throw HttpError{501, "only the chunked transfer coding is supported"};
  if (have_length && have_coding)
    throw HttpError{400, "both Content-Length and Transfer-Encoding given"};
  f.chunked = have_coding;
  if (f.content_length > max_body_bytes)
    throw HttpError{413, base::str_cat("the request body has ", f.content_length,
                                       " bytes; this server accepts at most ", max_body_bytes)};
  return f;
}

size_t ChunkedDecoder::feed(std::string_view data, std::string& body) {
  size_t used = 0;
  while (used < data.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size() - used));
      body.append(data.substr(used, n));
      used += n;
      remaining_ -= n;
      if (remaining_ == 0) state_ = State::kDataEnd;
      continue;
    }
    // Line-oriented states: collect up to LF.
    const char c = data[used++];
    if (line_.size() > 1024) throw HttpError{400, "chunk line too long"};
    if (c != '\n') {
      line_.push_back(c);
      continue;
    }
    if (line_.empty() || line_.back() != '\r') throw HttpError{400, "chunk line without CRLF"};
    line_.pop_back();
    if (state_ == State::kDataEnd) {
      if (!line_.empty()) throw HttpError{400, "chunk data longer than its size"};
      state_ = State::kSize;
    } else if (state_ == State::kTrailer) {
      if (line_.empty()) state_ = State::kDone;
    } else {  // kSize: hex digits, optional extensions after ';'
      const std::string_view size = trim(std::string_view(line_).substr(0, line_.find(';')));
      if (size.empty() || size.size() > 15) throw HttpError{400, "malformed chunk size"};
      uint64_t n = 0;
      for (char h : size) {
        const int d =
            std::isxdigit(static_cast<unsigned char>(h))
                ? (std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                                                               : (std::tolower(h) - 'a' + 10))
                : -1;
        if (d < 0) throw HttpError{400, "malformed chunk size"};
        n = n * 16 + static_cast<uint64_t>(d);
      }
      if (body.size() + n > max_body_bytes_)
        throw HttpError{413, base::str_cat("the request body exceeds ", max_body_bytes_, " bytes")};
      remaining_ = n;
      state_ = n == 0 ? State::kTrailer : State::kData;
    }
    line_.clear();
  }
  return used;
}

std::string_view status_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 421:
      return "Misdirected Request";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

bool BodyBudget::take(uint64_t n_bytes) {
  uint64_t held = held_bytes_.load();
  do {
    if (limit_bytes_ > 0 && (n_bytes > limit_bytes_ || held > limit_bytes_ - n_bytes)) return false;
  } while (!held_bytes_.compare_exchange_weak(held, held + n_bytes));
  return true;
}

void BodyBudget::give(uint64_t n_bytes) {
  held_bytes_.fetch_sub(n_bytes);
  if (n_bytes >= kTrimBodyBytes) ::malloc_trim(0);
}

HttpConnection::HttpConnection(int fd, const HttpLimits& limits, const std::atomic<bool>* stopping)
    : fd_(fd), limits_(limits), stopping_(stopping), cancelling_(stopping), aborting_(stopping) {}

HttpConnection::HttpConnection(int fd, const HttpLimits& limits, const StopFlags& stop,
                               BodyBudget* bodies)
    : fd_(fd),
      limits_(limits),
      stopping_(&stop.stopping),
      cancelling_(&stop.cancelling),
      aborting_(&stop.aborting),
      bodies_(bodies) {}

HttpConnection::~HttpConnection() {
  release_body();
  ::close(fd_);
}

void HttpConnection::release_body() {
  if (bodies_ && body_held_bytes_ > 0) bodies_->give(body_held_bytes_);
  body_held_bytes_ = 0;
}

void HttpConnection::linger() {
  // Closing with unread input makes the kernel reset the connection, which can destroy the reply
  // before the client reads it. Stop writing, read and discard for a bounded time, then close.
  ::shutdown(fd_, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLingerMs);
  uint64_t drained = 0;
  char sink[16384];
  while (drained < kLingerBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fd_, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd_, sink, sizeof(sink), MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<uint64_t>(n);
  }
}

bool HttpConnection::fill(std::chrono::steady_clock::time_point deadline) {
  while (!stopping_->load()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kPollSliceMs)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      (n == 0 ? eof_ : broken_) = true;
      return false;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
  return false;
}

std::optional<HttpRequest> HttpConnection::read_request() {
  using Clock = std::chrono::steady_clock;
  // Both deadlines are totals, not per byte: a client that sends a byte now and then must not
  // hold its connection (and its thread) for longer than they say.
  const Clock::time_point idle_deadline =
      Clock::now() + std::chrono::milliseconds(limits_.idle_timeout_ms);
  std::optional<Clock::time_point> deadline;  // from the request's first byte
  const auto note_start = [&] {
    if (!deadline && buffer_.size() > leading_blank_lines(buffer_))
      deadline = Clock::now() + std::chrono::milliseconds(limits_.read_timeout_ms);
  };
  note_start();
  HttpRequest req;
  size_t head_bytes = 0;
  while (parse_request_head(buffer_, req, head_bytes) == HeadParse::kIncomplete) {
    if (buffer_.size() > limits_.max_head_bytes)
      throw HttpError{431, "the request head is larger than the server accepts"};
    const bool started = deadline.has_value();
    if (!fill(started ? *deadline : idle_deadline)) {
      if (started && !broken_ && !eof_ && !stopping_->load())
        throw HttpError{408, "the request head did not arrive in time"};
      return std::nullopt;
    }
    note_start();
  }
  note_start();  // a head parsed at once (pipelined) starts now
  if (head_bytes > limits_.max_head_bytes)
    throw HttpError{431, "the request head is larger than the server accepts"};
  buffer_.erase(0, head_bytes);
  responded_ = false;
  chunked_out_ = false;
  event_stream_ = false;
  probed_ = false;
  response_headers_.clear();
  release_body();
  version_minor_ = req.version_minor;
  const std::string* connection = req.header("connection");
  keep_alive_ = req.version_minor == 1 ? !lists_token(connection, "close")
                                       : lists_token(connection, "keep-alive");
  const BodyFraming framing = body_framing(req, limits_.max_body_bytes);
  if (const std::string* expect = req.header("expect")) {
    if (lower(*expect) != "100-continue") throw HttpError{417, "unsupported Expect header"};
    if (req.version_minor == 1 && (framing.chunked || framing.content_length > 0) &&
        buffer_.empty() && !write_all("HTTP/1.1 100 Continue\r\n\r\n"))
      return std::nullopt;
  }
  // Body bytes are taken from the server's budget before they are held (a declared length at
  // once, a chunked body as it grows), so that many large bodies at once get 503, not memory.
  const auto hold = [&](uint64_t total_bytes) {
    if (total_bytes <= body_held_bytes_) return;
    if (bodies_ && !bodies_->take(total_bytes - body_held_bytes_))
      throw HttpError{
          503,
          base::str_cat("the server holds as many request bodies as it may (",
                        bodies_->limit_bytes(), " bytes, --max-body-memory); try again shortly"),
          1};
    body_held_bytes_ = total_bytes;
  };
  const auto more = [&] {
    if (fill(*deadline)) return true;
    if (broken_ || eof_ || stopping_->load()) return false;
    throw HttpError{408, "the request body did not arrive in time"};
  };
  if (framing.chunked) {
    ChunkedDecoder decoder(limits_.max_body_bytes);
    while (true) {
      buffer_.erase(0, decoder.feed(buffer_, req.body));
      hold(req.body.size());
      if (decoder.done()) break;
      if (!more()) return std::nullopt;
    }
  } else {
    const uint64_t length = framing.content_length;
    hold(length);
    req.body.reserve(length);  // one allocation of the body's size, read into directly
    while (true) {
      const size_t n = std::min<uint64_t>(length - req.body.size(), buffer_.size());
      req.body.append(buffer_, 0, n);
      buffer_.erase(0, n);
      if (req.body.size() == length) break;
      if (!more()) return std::nullopt;
    }
  }
  if (buffer_.capacity() > 2 * limits_.max_head_bytes) buffer_.shrink_to_fit();
  return req;
}

bool HttpConnection::write_all(std::string_view data) {
  // A total for the piece, not a time since the last byte: a client that takes a byte now and
  // then must not keep a generation (and the one generation slot) waiting on it.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(limits_.write_timeout_ms);
  while (!data.empty() && !broken_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (aborting_->load()) {
      broken_ = true;
      break;
    }
    if (left <= 0) {
      write_timed_out_ = broken_ = true;
      break;
    }
    pollfd p{fd_, POLLOUT, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kPollSliceMs)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;
    if (r < 0 || (p.revents & (POLLERR | POLLHUP))) {
      broken_ = true;
      break;
    }
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      broken_ = true;
      break;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return !broken_;
}

std::string HttpConnection::head(int status, std::string_view content_type,
                                 const std::vector<std::pair<std::string, std::string>>& extra,
                                 bool streamed, size_t content_length) {
  std::string h = base::str_cat("HTTP/1.", version_minor_, " ", status, " ", status_reason(status),
                                "\r\nContent-Type: ", content_type, "\r\n");
  if (!streamed) {
    h += base::str_cat("Content-Length: ", content_length, "\r\n");
  } else if (chunked_out_) {
    h += "Transfer-Encoding: chunked\r\n";
  }
  h += keep_alive_ ? (version_minor_ == 0 ? "Connection: keep-alive\r\n" : "")
                   : "Connection: close\r\n";
  for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
  for (const auto& [k, v] : response_headers_) h += k + ": " + v + "\r\n";
  h += "\r\n";
  return h;
}

bool HttpConnection::send(int status, std::string_view content_type, std::string_view body,
                          const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  responded_ = true;
  std::string out = head(status, content_type, extra_headers, false, body.size());
  out.append(body);
  return write_all(out);
}

bool HttpConnection::begin_stream(int status, std::string_view content_type,
                                  const std::vector<std::pair<std::string, std::string>>& extra) {
  responded_ = true;
  chunked_out_ = version_minor_ == 1;
  event_stream_ = content_type.rfind("text/event-stream", 0) == 0;
  if (!chunked_out_) keep_alive_ = false;  // the close marks the end
  return write_all(head(status, content_type, extra, true, 0));
}

bool HttpConnection::write(std::string_view data) {
  if (data.empty()) return !client_gone();
  if (!chunked_out_) return write_all(data);
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string out = size;
  out.append(data);
  out += "\r\n";
  return write_all(out);
}

bool HttpConnection::finish() { return chunked_out_ ? write_all("0\r\n\r\n") : !broken_; }

bool HttpConnection::client_gone() {
  if (broken_ || cancelling_->load()) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  // A reset (or both directions shut) is a client that is gone.
  if (p.revents & (POLLHUP | POLLERR)) return broken_ = true;
  bool fin = (p.revents & POLLRDHUP) != 0;
  if (!fin) {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return broken_ = true;
    fin = n == 0;  // bytes waiting are the client's next request, not a hang-up
  }
  if (!fin) return false;
  // FIN alone: the client closed, or only shut down its sending side and waits for the answer
  // (HTTP allows it). Only a write tells them apart: a closed socket answers it with a reset,
  // seen at the next poll (at once on loopback, one round trip away otherwise).
  // Requests it pipelined before the FIN are still read and answered.
  eof_ = true;
  if (!probed_) probe_half_close();
  if (broken_) return true;
  pollfd q{fd_, 0, 0};
  if (::poll(&q, 1, 0) > 0 && (q.revents & (POLLHUP | POLLERR))) broken_ = true;
  return broken_;
}

void HttpConnection::probe_half_close() {
  probed_ = true;
  if (!responded_) {
    // A client must accept interim 1xx responses it did not ask for (RFC 9110 15.2); HTTP/1.0
    // has none, so there a FIN is taken as the client leaving.
    if (version_minor_ == 0) {
      broken_ = true;
      return;
    }
    write_all("HTTP/1.1 100 Continue\r\n\r\n");
  } else if (event_stream_) {
    write(":\n\n");  // an SSE comment, which clients ignore
  }
  // Any other stream is probed by its next write.
}

HttpServer::HttpServer(HttpLimits limits, Handler handler)
    : limits_(limits), handler_(std::move(handler)), bodies_(limits.max_body_memory_bytes) {
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
    base::fail("cannot create the server's wake-up pipe: ", std::strerror(errno));
}

HttpServer::~HttpServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void HttpServer::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    base::fail("cannot resolve --host ", host, ": ", ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      sockaddr_storage bound{};
      socklen_t len = sizeof(bound);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) base::fail("cannot listen on ", host, ":", port, ": ", last_error);
}

void HttpServer::request_stop() {
  stop_.stopping.store(true);
  const char c = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_pipe_[1], &c, 1);
}

void HttpServer::run() {
  DF_ASSERT(listen_fd_ >= 0);
  while (!stop_.stopping.load()) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;  // SSE events are small and must leave at once
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (limits_.send_buffer_bytes > 0)
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &limits_.send_buffer_bytes,
                   sizeof(limits_.send_buffer_bytes));
    std::unique_lock<std::mutex> lock(mu_);
    bool reserved = false;
    if (n_active_ >= limits_.max_connections) {
      if (n_reserved_ >= limits_.reserved_connections) {
        lock.unlock();
        const std::string body = too_many_connections();
        const std::string reply =
            base::str_cat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n",
                          "Content-Length: ", body.size(),
                          "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n", body);
        [[maybe_unused]] ssize_t n =
            ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(fd);
        continue;
      }
      reserved = true;
      ++n_reserved_;
    } else {
      ++n_active_;
    }
    lock.unlock();
    std::thread([this, fd, reserved] { serve_connection(fd, reserved); }).detach();
  }
  // Accept nothing more: clients waiting in the listen queue are refused, not left hanging.
  ::close(listen_fd_);
  listen_fd_ = -1;
  std::unique_lock<std::mutex> lock(mu_);
  const auto idle = [&] { return n_active_ == 0 && n_reserved_ == 0; };
  // Requests in flight may finish within the grace period; then generations are cancelled and
  // their handlers send an ending, which has kEndingMs more to go out before writes give up.
  if (!idle_.wait_for(lock, std::chrono::milliseconds(shutdown_grace_ms_), idle)) {
    stop_.cancelling.store(true);
    if (!idle_.wait_for(lock, std::chrono::milliseconds(kEndingMs), idle))
      stop_.aborting.store(true);
  }
  idle_.wait(lock, idle);
}

void HttpServer::serve_connection(int fd, bool reserved) {
  {
    HttpLimits limits = limits_;
    if (reserved) {
      limits.read_timeout_ms = std::min(limits.read_timeout_ms, limits.reserved_timeout_ms);
      limits.idle_timeout_ms = std::min(limits.idle_timeout_ms, limits.reserved_timeout_ms);
    }
    HttpConnection conn(fd, limits, stop_, &bodies_);
    while (true) {
      std::optional<HttpRequest> req;
      try {
        req = conn.read_request();
      } catch (const HttpError& e) {
        conn.set_keep_alive(false);
        ApiError err{e.status, e.message,
                     e.status >= 500 ? "server_error" : "invalid_request_error"};
        if (e.status == 413) err.code = "request_too_large";
        if (e.status == 503) err.code = "server_overloaded";
        std::vector<std::pair<std::string, std::string>> extra;
        if (e.retry_after_s > 0) extra.emplace_back("Retry-After", std::to_string(e.retry_after_s));
        conn.release_body();  // a partial body is not kept through the linger
        conn.send(e.status, "application/json", error_json(err), extra);
        conn.linger();
        break;
      }
      if (!req) break;
      if (stop_.stopping.load()) {  // read whole (pipelined) as the server began to stop
        conn.set_keep_alive(false);
        conn.send(503, "application/json",
                  error_json(ApiError{503, "the server is shutting down", "server_error", "",
                                      "server_shutting_down"}));
        break;
      }
      if (reserved) {
        // The probes stay answerable when the connection limit is reached; nothing else is.
        conn.set_keep_alive(false);
        if (req->method != "GET" || (req->path != "/health" && req->path != "/v1/models")) {
          conn.send(503, "application/json", too_many_connections(), {{"Retry-After", "1"}});
          conn.linger();
          break;
        }
      }
      try {
        handler_(*req, conn);
      } catch (const std::exception& e) {
        // Handlers answer their own errors; this is a bug, logged and answered if still possible.
        base::log_warn("server: ", req->method, " ", req->path, " failed: ", e.what());
        conn.set_keep_alive(false);
        if (!conn.responded())
          conn.send(
              500, "application/json",
              error_json(ApiError{500, "internal error: see the server log", "server_error"}));
      }
      req.reset();
      conn.release_body();
      if (!conn.keep_alive()) break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  --(reserved ? n_reserved_ : n_active_);
  if (n_active_ == 0 && n_reserved_ == 0) idle_.notify_all();
}

}  // namespace deltafin::server
