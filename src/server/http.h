// A small HTTP/1.1 server on plain sockets: one thread per connection, keep-alive, request limits
// enforced before a body is read (413 from Content-Length alone), chunked streaming responses, and
// a cheap "has the client gone?" probe that generation loops call once per token.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin::server {

struct HttpRequest {
  std::string method;     // "GET", "POST", ...
  std::string target;     // path and query (origin form)
  std::string authority;  // "host:port" of an absolute-form target ("http://host/..."), else empty
  std::string path;       // target without the query
  int version_minor = 1;  // HTTP/1.0 or HTTP/1.1
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;

  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view name) const;
};

// What ended a request's reading early; answered with `status` and the connection closed.
struct HttpError {
  int status;  // 400, 408, 413, 431, 501, 505
  std::string message;
};

enum class HeadParse { kIncomplete, kDone };

// Parses the request line and headers at the start of `data` ("METHOD SP target SP HTTP/1.x",
// then "name: value" lines, then an empty line). kIncomplete while the blank line has not
// arrived; on kDone, fills `out` (not its body) and sets `head_bytes`. Throws HttpError for a
// malformed head. Pure, so the fuzzer drives it directly.
HeadParse parse_request_head(std::string_view data, HttpRequest& out, size_t& head_bytes);

// How the body is framed, from the parsed head: Content-Length, chunked, or none. Throws
// HttpError (400 for conflicting or malformed framing, 501 for other transfer codings, 413 when a
// declared length exceeds max_body_bytes).
struct BodyFraming {
  bool chunked = false;
  uint64_t content_length = 0;
};
BodyFraming body_framing(const HttpRequest& head, uint64_t max_body_bytes);

// Incremental decoder of a chunked body: feed() what arrived, returns the bytes it consumed;
// done() once the final chunk and trailers are read. Throws HttpError(400) on bad syntax and
// HttpError(413) as soon as the decoded body would pass max_body_bytes.
class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(uint64_t max_body_bytes) : max_body_bytes_(max_body_bytes) {}
  size_t feed(std::string_view data, std::string& body);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  uint64_t max_body_bytes_;
  State state_ = State::kSize;
  uint64_t remaining_ = 0;
  std::string line_;
};

std::string_view status_reason(int status);

struct HttpLimits {
  size_t max_head_bytes = 64 * 1024;
  uint64_t max_body_bytes = 8 * 1024 * 1024;
  int read_timeout_ms = 30'000;  // for a whole request (head and body) from its first byte
  int idle_timeout_ms = 60'000;  // in all, between requests on a kept-alive connection
  int max_connections = 64;      // connections served at once (--max-connections)
  // Past max_connections, this many more are read for one request each, which is answered only
  // when it is GET /health or GET /v1/models (else 503), within reserved_timeout_ms. Past those
  // too, a connection gets 503 at once.
  int reserved_connections = 8;
  int reserved_timeout_ms = 2'000;
};

// One accepted socket. Used by one thread at a time (its connection thread); client_gone() only
// peeks, so it is safe to call between writes.
class HttpConnection {
 public:
  HttpConnection(int fd, const HttpLimits& limits, const std::atomic<bool>* stopping);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // The next request, or nullopt when the peer closed, went idle, or the server is stopping.
  // Throws HttpError for a request that cannot be read (the caller answers and closes).
  std::optional<HttpRequest> read_request();

  // A whole response with Content-Length. Returns false if the client is gone.
  bool send(int status, std::string_view content_type, std::string_view body,
            const std::vector<std::pair<std::string, std::string>>& extra_headers = {});
  // A streamed response: the head now, then write() pieces, then finish(). Chunked on HTTP/1.1,
  // close-delimited on HTTP/1.0. Each returns false once the client is gone.
  bool begin_stream(int status, std::string_view content_type,
                    const std::vector<std::pair<std::string, std::string>>& extra_headers = {});
  bool write(std::string_view data);
  bool finish();

  // True once the peer has closed or reset its side (checked without blocking), a write failed,
  // or the server is stopping. Generation loops poll this once per token.
  bool client_gone();
  // Whether the connection may serve another request after this response.
  bool keep_alive() const { return keep_alive_ && !broken_; }
  void set_keep_alive(bool keep) { keep_alive_ = keep; }
  // After an error reply sent before the request was read whole: lets the client finish sending
  // (bounded in time and bytes) so that it reads the reply instead of a connection reset.
  void linger();
  // Whether the current request has been answered (a response head went out).
  bool responded() const { return responded_; }

 private:
  bool write_all(std::string_view data);
  // Appends at least one byte to buffer_ before the deadline; false on EOF, timeout or stop.
  bool fill(std::chrono::steady_clock::time_point deadline);
  std::string head(int status, std::string_view content_type,
                   const std::vector<std::pair<std::string, std::string>>& extra, bool streamed,
                   size_t content_length);

  int fd_;
  HttpLimits limits_;
  const std::atomic<bool>* stopping_;
  std::string buffer_;  // bytes read but not yet consumed
  int version_minor_ = 1;
  bool keep_alive_ = true;
  bool chunked_out_ = false;
  bool broken_ = false;  // a read or write failed: the peer is gone
  bool eof_ = false;     // the peer closed its sending side
  bool responded_ = false;
};

// Listens on host:port and hands each request to `handler` on its connection's thread.
class HttpServer {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpConnection&)>;

  HttpServer(HttpLimits limits, Handler handler);
  ~HttpServer();

  // Binds and listens (port 0 picks a free one); throws base::Error naming the address.
  void bind(const std::string& host, int port);
  int port() const { return port_; }
  // Accepts until request_stop(); then waits for the connection threads to end.
  void run();
  // Async-signal-safe: flags the stop and wakes run().
  void request_stop();
  const std::atomic<bool>& stopping() const { return stopping_; }

 private:
  // `reserved`: over max_connections, so only /health and /v1/models are served, once.
  void serve_connection(int fd, bool reserved);

  HttpLimits limits_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable idle_;
  int n_active_ = 0;
  int n_reserved_ = 0;
};

}  // namespace deltafin::server
