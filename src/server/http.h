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
  int status;  // 400, 408, 413, 431, 501, 503, 505
  std::string message;
  int retry_after_s = 0;  // > 0: sent as Retry-After
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
  // One piece of a response (a whole body, or one stream event) must be taken by the client
  // within this time, in all: a client that reads a byte now and then cannot hold the generation.
  int write_timeout_ms = 30'000;
  // SO_SNDBUF of each connection (0: the kernel's own, which grows to megabytes): small, so that
  // a client that stops reading blocks the writer soon and the write timeout can act.
  int send_buffer_bytes = 32 * 1024;
  // Request bodies held by all connections at once (0: no bound); past it, 503 with Retry-After.
  uint64_t max_body_memory_bytes = 0;
};

// How a stopping server ends its connections (SIGTERM), in three steps: `stopping`: nothing new
// is accepted or read; `cancelling`: client_gone() says true, so a generation in flight ends and
// its handler sends an ending; `aborting`: writes give up at once.
struct StopFlags {
  std::atomic<bool> stopping{false};
  std::atomic<bool> cancelling{false};
  std::atomic<bool> aborting{false};
};

// The bytes of request bodies that all connections hold at once, bounded; what is handed back
// after a large body is returned to the system (malloc_trim), not kept in the heap.
class BodyBudget {
 public:
  explicit BodyBudget(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  bool take(uint64_t n_bytes);  // false (and nothing taken) when it would pass the limit
  void give(uint64_t n_bytes);
  uint64_t held_bytes() const { return held_bytes_.load(); }
  uint64_t limit_bytes() const { return limit_bytes_; }

 private:
  uint64_t limit_bytes_;  // 0: no bound
  std::atomic<uint64_t> held_bytes_{0};
};

// One accepted socket. Used by one thread at a time (its connection thread); client_gone() only
// peeks, so it is safe to call between writes.
class HttpConnection {
 public:
  // `stopping` alone: it stops reading, cancels and aborts writes at once (for tests).
  HttpConnection(int fd, const HttpLimits& limits, const std::atomic<bool>* stopping);
  HttpConnection(int fd, const HttpLimits& limits, const StopFlags& stop, BodyBudget* bodies);
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

  // True once the peer is gone (checked without blocking), a write failed or timed out, or the
  // server is cancelling. Generation loops poll this once per token. A peer that only shut down
  // its sending side (FIN) may still read: that is told apart from one that closed by writing
  // once (an interim "100 Continue" before the response, an SSE comment in an event stream), to
  // which a closed socket answers with a reset.
  bool client_gone();
  // Why client_gone() turned true, for the log.
  bool write_timed_out() const { return write_timed_out_; }
  bool server_cancelling() const { return cancelling_->load(); }
  // Added to every response head of the current request (CORS).
  void add_response_header(std::string name, std::string value) {
    response_headers_.emplace_back(std::move(name), std::move(value));
  }
  // Hands the current request's body bytes back to the server's BodyBudget.
  void release_body();
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

  // Writes once to learn whether a peer that sent FIN still reads (see client_gone).
  void probe_half_close();

  int fd_;
  HttpLimits limits_;
  const std::atomic<bool>* stopping_;
  const std::atomic<bool>* cancelling_;
  const std::atomic<bool>* aborting_;
  BodyBudget* bodies_ = nullptr;  // null: unbounded
  uint64_t body_held_bytes_ = 0;  // taken from bodies_ for the current request
  std::vector<std::pair<std::string, std::string>> response_headers_;
  std::string buffer_;  // bytes read but not yet consumed
  int version_minor_ = 1;
  bool keep_alive_ = true;
  bool chunked_out_ = false;
  bool broken_ = false;  // a read or write failed: the peer is gone
  bool eof_ = false;     // the peer closed its sending side
  bool responded_ = false;
  bool write_timed_out_ = false;
  bool probed_ = false;        // the half-close probe went out
  bool event_stream_ = false;  // the stream is text/event-stream (an SSE comment probes it)
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
  const std::atomic<bool>& stopping() const { return stop_.stopping; }
  // After request_stop(): how long requests in flight may still run before they are cancelled
  // (and their handlers send an ending); run() returns once they are done.
  void set_shutdown_grace_ms(int ms) { shutdown_grace_ms_ = ms; }
  const BodyBudget& bodies() const { return bodies_; }

 private:
  // `reserved`: over max_connections, so only /health and /v1/models are served, once.
  void serve_connection(int fd, bool reserved);

  HttpLimits limits_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  StopFlags stop_;
  BodyBudget bodies_;
  int shutdown_grace_ms_ = 0;
  std::mutex mu_;
  std::condition_variable idle_;
  int n_active_ = 0;
  int n_reserved_ = 0;
};

}  // namespace deltafin::server
