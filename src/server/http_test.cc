// The HTTP layer: head parsing, body framing, chunked bodies, and a connection over a socket
// pair (limits before the body is read, 100-continue, streaming, hang-up detection).
#include "server/http.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "server/test_socket.h"

namespace deltafin::server {
namespace {

HttpRequest head_of(const std::string& text) {
  HttpRequest r;
  size_t n = 0;
  EXPECT_EQ(parse_request_head(text, r, n), HeadParse::kDone) << text;
  return r;
}

int status_of(const std::string& text) {
  HttpRequest r;
  size_t n = 0;
  try {
    parse_request_head(text, r, n);
    body_framing(r, 1000);
  } catch (const HttpError& e) {
    return e.status;
  }
  return 0;
}

TEST(HttpParse, RequestLineAndHeaders) {
  HttpRequest r;
  size_t n = 0;
  const std::string text =
      "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type:  application/json \r\n"
      "X-Empty:\r\n\r\nBODY";
  ASSERT_EQ(parse_request_head(text, r, n), HeadParse::kDone);
  EXPECT_EQ(n, text.size() - 4);
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/chat/completions");
  EXPECT_EQ(r.target, "/v1/chat/completions?x=1");
  EXPECT_EQ(r.version_minor, 1);
  ASSERT_NE(r.header("content-type"), nullptr);
  EXPECT_EQ(*r.header("content-type"), "application/json");
  EXPECT_EQ(*r.header("x-empty"), "");
  EXPECT_EQ(r.header("missing"), nullptr);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nHost: a\r\n", r, n), HeadParse::kIncomplete);
  EXPECT_EQ(head_of("GET / HTTP/1.0\r\n\r\n").version_minor, 0);
}

TEST(HttpParse, RefusesMalformedHeads) {
  EXPECT_EQ(status_of("GET  / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1 x\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET x HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("G(T / HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / HTTP/1.2\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET / FTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n folded\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nno colon\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\n: empty name\r\n\r\n"), 400);
  EXPECT_EQ(status_of(std::string("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n", 26)), 400);
}

TEST(HttpParse, BodyFraming) {
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n"), 0);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n"), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n"), 0);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n"),
            400);
  const BodyFraming f =
      body_framing(head_of("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"), 10);
  EXPECT_TRUE(f.chunked);
}

TEST(HttpParse, Http11Details) {
  // Blank lines before the request line are skipped and counted as head bytes.
  HttpRequest r;
  size_t n = 0;
  const std::string text = "\r\n\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n";
  ASSERT_EQ(parse_request_head(text, r, n), HeadParse::kDone);
  EXPECT_EQ(n, text.size());
  EXPECT_EQ(r.path, "/a");
  EXPECT_EQ(parse_request_head("\r\n", r, n), HeadParse::kIncomplete);

  // The absolute form.
  r = head_of("POST http://127.0.0.1:8000/v1/chat/completions?x=1 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.path, "/v1/chat/completions");
  EXPECT_EQ(r.target, "/v1/chat/completions?x=1");
  EXPECT_EQ(r.authority, "127.0.0.1:8000");
  r = head_of("GET HTTP://localhost HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.path, "/");
  EXPECT_EQ(r.authority, "localhost");
  EXPECT_EQ(head_of("GET /x HTTP/1.1\r\n\r\n").authority, "");
  EXPECT_EQ(status_of("GET http:///x HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(status_of("GET ftp://h/x HTTP/1.1\r\n\r\n"), 400);

  // A Content-Length past the limit is 413 however many digits it has.
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n"), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: " + std::string(200, '9') + "\r\n\r\n"),
            413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 0001000\r\n\r\n"), 0);

  // Chunked applied twice is 400, in one header or two; other codings stay 501.
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n"),
            400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: \r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked,\r\n\r\n"), 0);
}

TEST(HttpParse, ChunkedBodies) {
  std::string body;
  ChunkedDecoder d(100);
  const std::string wire = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  // Fed one byte at a time: the decoder must not care how the bytes arrive.
  size_t used = 0;
  while (!d.done() && used < wire.size())
    used += d.feed(std::string_view(wire).substr(used, 1), body);
  EXPECT_TRUE(d.done());
  EXPECT_EQ(body, "hello world");
  EXPECT_EQ(wire.substr(used), "NEXT");

  const auto fails = [](const std::string& w, uint64_t max) {
    std::string b;
    ChunkedDecoder c(max);
    try {
      c.feed(w, b);
    } catch (const HttpError& e) {
      return e.status;
    }
    return 0;
  };
  EXPECT_EQ(fails("zz\r\n", 100), 400);
  EXPECT_EQ(fails("5\r\nhelloX\r\n", 100), 400);
  EXPECT_EQ(fails("5\nhello", 100), 400);
  EXPECT_EQ(fails("65\r\n", 100), 413);  // 101 bytes announced
  EXPECT_EQ(fails("fffffffffffffff\r\n", 1 << 20), 413);
}

// A connection on one end of a socket pair; the test plays the client on the other.
struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    server_fd = fds[0];
    client = fds[1];
  }
  ~Pair() {
    if (client >= 0) ::close(client);
  }
  void send(const std::string& s) const {
    ASSERT_EQ(::write(client, s.data(), s.size()), (ssize_t)s.size());
  }
  std::string read_some() const {
    char buf[65536];
    const ssize_t n = ::read(client, buf, sizeof(buf));
    return n > 0 ? std::string(buf, n) : std::string();
  }
  std::string read_all() const {
    std::string out, part;
    while (!(part = read_some()).empty()) out += part;
    return out;
  }
  int server_fd = -1, client = -1;
  std::atomic<bool> stopping{false};
};

TEST(HttpConnection, ReadsRequestsAndKeepsAlive) {
  Pair p;
  HttpLimits limits;
  auto conn = std::make_unique<HttpConnection>(p.server_fd, limits, &p.stopping);
  p.send("POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\r\n");
  std::optional<HttpRequest> r = conn->read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "abc");
  EXPECT_TRUE(conn->keep_alive());
  EXPECT_TRUE(conn->send(200, "text/plain", "ok"));
  r = conn->read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "/b");
  conn->set_keep_alive(false);
  EXPECT_TRUE(conn->send(404, "text/plain", "no"));
  conn.reset();
  const std::string wire = p.read_all();
  EXPECT_NE(wire.find("HTTP/1.1 200 OK\r\n"), std::string::npos);
  EXPECT_NE(wire.find("Content-Length: 2\r\n\r\nok"), std::string::npos);
  EXPECT_NE(wire.find("HTTP/1.1 404 Not Found\r\n"), std::string::npos);
  EXPECT_NE(wire.find("Connection: close\r\n"), std::string::npos);
}

TEST(HttpConnection, IgnoresAnExtraCrlfAfterABody) {
  Pair p;
  HttpLimits limits;
  limits.read_timeout_ms = 50;
  limits.idle_timeout_ms = 100;
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  p.send("POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc\r\nGET /b HTTP/1.1\r\n\r\n\r\n");
  std::optional<HttpRequest> r = conn.read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "abc");
  r = conn.read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "/b");
  // The trailing CRLF is not the start of a request: the connection goes idle, not 408.
  EXPECT_FALSE(conn.read_request());
}

TEST(HttpConnection, HandsOverExactlyTheDeclaredBody) {
  // A NUL byte is body like any other: the request parser sees all Content-Length bytes.
  Pair p;
  HttpLimits limits;
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  const std::string body("{}\0anything", 11);
  p.send("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n" + body + "GET /b HTTP/1.1\r\n\r\n");
  std::optional<HttpRequest> r = conn.read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, body);
  r = conn.read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "/b");
}

// A client that sends one byte every 20 ms, each well within the timeout, gets 408 when the
// total deadline from its first byte passes, not after its last byte.
void expect_total_deadline(const std::string& prefix, const std::string& drip) {
  Pair p;
  HttpLimits limits;
  limits.read_timeout_ms = 300;
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  std::atomic<bool> answered{false};
  p.send(prefix);
  std::thread client([&] {
    for (size_t i = 0; i < drip.size() && !answered; ++i) {
      if (::write(p.client, &drip[i], 1) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the slow client's pace
    }
  });
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  try {
    conn.read_request();
  } catch (const HttpError& e) {
    status = e.status;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  answered = true;
  client.join();
  EXPECT_EQ(status, 408) << prefix;
  // The drip lasts 4 s; a per-byte timeout would only fire after it.
  EXPECT_LT(took, std::chrono::milliseconds(2000)) << prefix;
}

TEST(HttpConnection, HeadAndBodyDeadlinesAreTotals) {
  expect_total_deadline("", "GET / HTTP/1.1\r\nX-Slow: " + std::string(200, 'a'));
  expect_total_deadline("POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", std::string(200, 'a'));
  expect_total_deadline("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nc8\r\n",
                        std::string(200, 'a'));
}

TEST(HttpConnection, RefusesLargeBodyBeforeReadingIt) {
  Pair p;
  HttpLimits limits;
  limits.max_body_bytes = 100;
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  // Only the head is sent: the answer must not wait for the body.
  p.send("POST / HTTP/1.1\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n");
  try {
    conn.read_request();
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 413);
  }
}

TEST(HttpConnection, ContinuesAndReadsChunkedBody) {
  Pair p;
  HttpLimits limits;
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  p.send("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n");
  std::thread client([&] {
    EXPECT_EQ(p.read_some(), "HTTP/1.1 100 Continue\r\n\r\n");
    p.send("3\r\nabc\r\n0\r\n\r\n");
  });
  std::optional<HttpRequest> r = conn.read_request();
  client.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "abc");
}

TEST(HttpConnection, StreamsChunksAndNoticesHangUp) {
  Pair p;
  HttpLimits limits;
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  p.send("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(conn.read_request());
  ASSERT_TRUE(conn.begin_stream(200, "text/event-stream"));
  ASSERT_TRUE(conn.write("data: 1\n\n"));
  EXPECT_FALSE(conn.client_gone());
  const std::string got = p.read_some();
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_NE(got.find("9\r\ndata: 1\n\n\r\n"), std::string::npos);
  ::close(p.client);
  p.client = -1;
  EXPECT_TRUE(conn.client_gone());
  EXPECT_FALSE(conn.write("data: 2\n\n"));
}

// A loopback TCP connection (a socket pair behaves differently on hang-up): `server_fd` is the
// accepted end, `client` the test's.
struct TcpPair {
  TcpPair() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener, 1), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    client = connect_to(ntohs(addr.sin_port));
    server_fd = ::accept(listener, nullptr, nullptr);
    ::close(listener);
  }
  ~TcpPair() {
    if (client >= 0) ::close(client);
  }
  void send(const std::string& s) const {
    ASSERT_EQ(::write(client, s.data(), s.size()), (ssize_t)s.size());
  }
  std::string read_all() const {
    std::string out;
    char buf[65536];
    for (ssize_t n; (n = ::read(client, buf, sizeof(buf))) > 0;) out.append(buf, n);
    return out;
  }
  // client_gone() polled the way a generation does, one call per "token" 2 ms apart; how many
  // calls it took to say true (0: it never did within `calls`).
  static int calls_until_gone(HttpConnection& conn, int calls) {
    for (int i = 1; i <= calls; ++i) {
      if (conn.client_gone()) return i;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return 0;
  }
  int server_fd = -1, client = -1;
  std::atomic<bool> stopping{false};
};

TEST(HttpConnection, HalfClosedClientGetsTheWholeResponse) {
  TcpPair p;
  HttpLimits limits;
  auto conn = std::make_unique<HttpConnection>(p.server_fd, limits, &p.stopping);
  p.send("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_TRUE(conn->read_request());
  ASSERT_EQ(::shutdown(p.client, SHUT_WR), 0);  // done sending, still reading
  EXPECT_EQ(TcpPair::calls_until_gone(*conn, 20), 0);
  EXPECT_TRUE(conn->send(200, "text/plain", "whole"));
  conn.reset();  // closes the server's end
  const std::string wire = p.read_all();
  EXPECT_EQ(wire.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n", 0), 0u) << wire;
  EXPECT_EQ(wire.substr(wire.size() - 5), "whole");
}

TEST(HttpConnection, HalfClosedClientGetsEveryPipelinedAnswer) {
  TcpPair p;
  HttpLimits limits;
  auto conn = std::make_unique<HttpConnection>(p.server_fd, limits, &p.stopping);
  p.send("GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
  ASSERT_EQ(::shutdown(p.client, SHUT_WR), 0);
  std::optional<HttpRequest> r = conn->read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(TcpPair::calls_until_gone(*conn, 5), 0);
  EXPECT_TRUE(conn->send(200, "text/plain", "a"));
  ASSERT_TRUE(conn->keep_alive());
  r = conn->read_request();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "/b");
  EXPECT_TRUE(conn->send(200, "text/plain", "b"));
  EXPECT_FALSE(conn->read_request());  // then the FIN
  conn.reset();
  const std::string wire = p.read_all();
  EXPECT_NE(wire.find("\r\n\r\na"), std::string::npos) << wire;
  EXPECT_EQ(wire.substr(wire.size() - 5), "\r\n\r\nb") << wire;
}

TEST(HttpConnection, HalfClosedClientGetsTheWholeStream) {
  TcpPair p;
  HttpLimits limits;
  auto conn = std::make_unique<HttpConnection>(p.server_fd, limits, &p.stopping);
  p.send("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(conn->read_request());
  ASSERT_TRUE(conn->begin_stream(200, "text/event-stream"));
  ASSERT_TRUE(conn->write("data: 1\n\n"));
  ASSERT_EQ(::shutdown(p.client, SHUT_WR), 0);
  EXPECT_EQ(TcpPair::calls_until_gone(*conn, 20), 0);
  ASSERT_TRUE(conn->write("data: 2\n\n"));
  ASSERT_TRUE(conn->finish());
  conn.reset();  // closes the server's end
  const std::string wire = p.read_all();
  EXPECT_NE(wire.find("data: 1\n\n\r\n3\r\n:\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"),
            std::string::npos)
      << wire;
}

TEST(HttpConnection, ClosedClientIsGoneWithinOneToken) {
  for (const bool streaming : {false, true}) {
    for (const bool reset : {false, true}) {
      TcpPair p;
      HttpLimits limits;
      HttpConnection conn(p.server_fd, limits, &p.stopping);
      p.send("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
      ASSERT_TRUE(conn.read_request());
      if (streaming) {
        ASSERT_TRUE(conn.begin_stream(200, "text/event-stream"));
      }
      EXPECT_FALSE(conn.client_gone());
      if (reset) {  // an abortive close sends RST at once
        const linger hard{1, 0};
        ::setsockopt(p.client, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
      }
      ::close(p.client);
      p.client = -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the FIN (or RST) arrives
      // One call sees the FIN and probes; the closed socket's reset is seen by the next at most.
      const int calls = TcpPair::calls_until_gone(conn, 50);
      EXPECT_GE(calls, 1) << "streaming " << streaming << " reset " << reset;
      EXPECT_LE(calls, 2) << "streaming " << streaming << " reset " << reset;
    }
  }
}

TEST(HttpConnection, WriteTimeoutIsATotal) {
  Pair p;
  HttpLimits limits;
  limits.write_timeout_ms = 300;
  const int small = 4096;
  ::setsockopt(p.server_fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  p.send("GET / HTTP/1.1\r\n\r\n");
  ASSERT_TRUE(conn.read_request());
  ASSERT_TRUE(conn.begin_stream(200, "text/event-stream"));
  // The client takes a byte every 10 ms, for 4 s: progress, but far too slow to take 4 MiB.
  std::atomic<bool> done{false};
  std::thread client([&] {
    char c;
    for (int i = 0; i < 400 && !done; ++i) {
      if (::read(p.client, &c, 1) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::shutdown(p.client, SHUT_RDWR);
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(conn.write(std::string(4 << 20, 'x')));
  const auto took = std::chrono::steady_clock::now() - start;
  done = true;
  client.join();
  EXPECT_TRUE(conn.write_timed_out());
  EXPECT_TRUE(conn.client_gone());
  // A timeout restarted by every byte would only end when the client does, after 4 s.
  EXPECT_LT(took, std::chrono::milliseconds(2000));
  EXPECT_GE(took, std::chrono::milliseconds(250));
}

TEST(HttpConnection, PipelinedBytesAreNotAHangUp) {
  Pair p;
  HttpLimits limits;
  HttpConnection conn(p.server_fd, limits, &p.stopping);
  p.send("GET / HTTP/1.1\r\n\r\nGET /next HTTP/1.1\r\n");
  ASSERT_TRUE(conn.read_request());
  EXPECT_FALSE(conn.client_gone());
  p.stopping = true;
  EXPECT_TRUE(conn.client_gone());  // a stopping server cancels generation too
}

TEST(HttpConnection, Http10ClosesAfterAStream) {
  Pair p;
  HttpLimits limits;
  auto conn = std::make_unique<HttpConnection>(p.server_fd, limits, &p.stopping);
  p.send("GET / HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(conn->read_request());
  EXPECT_FALSE(conn->keep_alive());
  ASSERT_TRUE(conn->begin_stream(200, "text/plain"));
  ASSERT_TRUE(conn->write("raw"));
  ASSERT_TRUE(conn->finish());
  conn.reset();
  const std::string wire = p.read_all();
  EXPECT_EQ(wire.substr(0, 17), "HTTP/1.0 200 OK\r\n");
  EXPECT_EQ(wire.substr(wire.size() - 7), "\r\n\r\nraw");
}

TEST(HttpServer, ServesOnLoopbackAndStops) {
  HttpLimits limits;
  HttpServer server(
      limits, [](const HttpRequest& r, HttpConnection& c) { c.send(200, "text/plain", r.path); });
  server.bind("127.0.0.1", 0);
  ASSERT_GT(server.port(), 0);
  std::thread loop([&] { server.run(); });
  const int fd = connect_to(server.port());
  ASSERT_GE(fd, 0);
  const std::string req = "GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::write(fd, req.data(), req.size()), (ssize_t)req.size());
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) got.append(buf, n);
  ::close(fd);
  EXPECT_NE(got.find("\r\n\r\n/hello"), std::string::npos);
  server.request_stop();
  loop.join();
}

// Sends `request` (if any) and reads until the server closes.
std::string exchange(int fd, const std::string& request) {
  if (!request.empty()) {
    EXPECT_EQ(::write(fd, request.data(), request.size()), (ssize_t)request.size());
  }
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) got.append(buf, n);
  ::close(fd);
  return got;
}

TEST(HttpServer, KeepsRoomForProbesAtTheConnectionLimit) {
  HttpLimits limits;
  limits.max_connections = 1;
  limits.reserved_connections = 1;
  HttpServer server(
      limits, [](const HttpRequest& r, HttpConnection& c) { c.send(200, "text/plain", r.path); });
  server.bind("127.0.0.1", 0);
  std::thread loop([&] { server.run(); });
  // The listen queue is accepted in order: `idle` takes the one connection, `probe` the reserve,
  // and `over` finds both taken.
  const int idle = connect_to(server.port());
  const int probe = connect_to(server.port());
  const std::string over = exchange(connect_to(server.port()), "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(over.rfind("HTTP/1.1 503 ", 0), 0u) << over;
  EXPECT_NE(over.find("Retry-After: 1\r\n"), std::string::npos);
  EXPECT_NE(over.find("too many open connections"), std::string::npos);
  const std::string health = exchange(probe, "GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(health.rfind("HTTP/1.1 200 ", 0), 0u) << health;
  EXPECT_NE(health.find("Connection: close\r\n"), std::string::npos);
  // The reserve is free again once the probe is answered (the server closed it; its thread
  // ends just after, so allow a few tries for the slot to be handed back).
  std::string models;
  for (int i = 0; i < 100; ++i) {
    models = exchange(connect_to(server.port()), "GET /v1/models HTTP/1.1\r\n\r\n");
    if (models.rfind("HTTP/1.1 200 ", 0) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(models.find("\r\n\r\n/v1/models"), std::string::npos) << models;
  std::string chat;
  for (int i = 0; i < 100; ++i) {
    chat = exchange(connect_to(server.port()),
                    "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
    if (chat.rfind("HTTP/1.1 503 ", 0) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(chat.rfind("HTTP/1.1 503 ", 0), 0u) << chat;
  EXPECT_NE(chat.find("Retry-After: 1\r\n"), std::string::npos) << chat;
  // The one real connection still works.
  EXPECT_NE(exchange(idle, "GET /a HTTP/1.1\r\nConnection: close\r\n\r\n").find("\r\n\r\n/a"),
            std::string::npos);
  server.request_stop();
  loop.join();
}

TEST(HttpServer, BoundsTheRequestBodiesHeldAtOnce) {
  HttpLimits limits;
  limits.max_body_bytes = 2000;
  limits.max_body_memory_bytes = 3000;
  HttpServer server(limits, [](const HttpRequest& r, HttpConnection& c) {
    c.send(200, "text/plain", std::to_string(r.body.size()));
  });
  server.bind("127.0.0.1", 0);
  std::thread loop([&] { server.run(); });
  const auto held = [&](uint64_t want) {  // connection threads hand bodies back as they end
    for (int i = 0; i < 200 && server.bodies().held_bytes() != want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return server.bodies().held_bytes();
  };
  // `first` declares 2000 bytes and sends 10: its 2000 are held while the rest arrives.
  const int first = connect_to(server.port());
  const std::string head = "POST / HTTP/1.1\r\nConnection: close\r\nContent-Length: 2000\r\n\r\n";
  ASSERT_EQ(::write(first, (head + std::string(10, 'a')).data(), head.size() + 10),
            (ssize_t)head.size() + 10);
  EXPECT_EQ(held(2000), 2000u);
  // A second 2000 would pass 3000: 503 with Retry-After, before its body is read.
  std::string over = (exchange)(connect_to(server.port()), head);
  EXPECT_EQ(over.rfind("HTTP/1.1 503 ", 0), 0u) << over;
  EXPECT_NE(over.find("Retry-After: 1\r\n"), std::string::npos) << over;
  EXPECT_NE(over.find("\"code\":\"server_overloaded\""), std::string::npos) << over;
  EXPECT_NE(over.find("--max-body-memory"), std::string::npos) << over;
  // A chunked body is counted as it grows: 1500 decoded bytes pass the 1000 left.
  over = (exchange)(connect_to(server.port()),
                    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5dc\r\n" +
                        std::string(1500, 'b') + "\r\n0\r\n\r\n");
  EXPECT_EQ(over.rfind("HTTP/1.1 503 ", 0), 0u) << over;
  // A small one fits beside it.
  const std::string small =
      (exchange)(connect_to(server.port()), "POST / HTTP/1.1\r\nContent-Length: 900\r\n\r\n" +
                                                std::string(900, 'c') +
                                                "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_NE(small.find("\r\n\r\n900"), std::string::npos) << small;
  EXPECT_NE(small.find("\r\n\r\n0"), std::string::npos) << small;  // the next request's body
  // `first` completes; then its bytes are handed back and a full-size body fits again.
  EXPECT_NE((exchange)(first, std::string(1990, 'a')).find("\r\n\r\n2000"), std::string::npos);
  EXPECT_EQ(held(0), 0u);
  EXPECT_NE(
      (exchange)(connect_to(server.port()), head + std::string(2000, 'd')).find("\r\n\r\n2000"),
      std::string::npos);
  server.request_stop();
  loop.join();
}

}  // namespace
}  // namespace deltafin::server
