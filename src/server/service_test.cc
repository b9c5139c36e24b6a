// The service over real sockets on loopback, on the k3-tiny-a fixture (whose greedy continuation
// is known) in a folder with a byte-level K3 tokenizer: routing and auth, greedy output, streaming,
// the memo, conversation-state reuse, seeded sampling, stop strings, 429 and disconnect.
#include "server/service.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include "server/test_socket.h"
#include "testing/k3_tiny_a.h"
#include "testing/text_model.h"

namespace deltafin::server {
namespace {

using Json = nlohmann::ordered_json;

// k3-tiny-a with a tokenizer beside it, made once per test binary.
const std::string& model_dir() {
  static const std::string dir = deltafin::testing::make_text_model(
      DELTAFIN_SOURCE_DIR, "k3-tiny-a", ::testing::TempDir() + "service-text-model");
  return dir;
}
const std::vector<int32_t>& kPrompt = ::deltafin::testing::kK3TinyAPrompt;
const std::vector<int32_t>& kGreedy = ::deltafin::testing::kK3TinyAGreedy;

void send_request(int fd, const std::string& method, const std::string& path,
                  const std::string& body, const std::string& extra_headers = "") {
  // As a well-behaved client sends it: a loopback Host, and JSON declared on a POST.
  std::string req = method + " " + path + " HTTP/1.1\r\nConnection: close\r\n";
  if (extra_headers.find("Host:") == std::string::npos) req += "Host: 127.0.0.1:8000\r\n";
  if (method == "POST" && extra_headers.find("Content-Type:") == std::string::npos)
    req += "Content-Type: application/json\r\n";
  req += extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
}

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  Json json() const { return Json::parse(body); }
  // The JSON of each "data:" event of a stream, without [DONE]; done says whether it came.
  std::vector<Json> events(bool* done = nullptr) const {
    std::vector<Json> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      const size_t end = body.find("\n\n", pos);
      const std::string data = body.substr(pos + 6, end - pos - 6);
      if (data == "[DONE]") {
        if (done) *done = true;
      } else {
        out.push_back(Json::parse(data));
      }
      pos = end;
    }
    return out;
  }
};

Reply read_reply(int fd) {
  std::string wire;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) wire.append(buf, n);
  ::close(fd);
  Reply r;
  const size_t head_end = wire.find("\r\n\r\n");
  EXPECT_NE(head_end, std::string::npos) << wire;
  if (head_end == std::string::npos) return r;
  r.status = std::stoi(wire.substr(9, 3));
  size_t line = wire.find("\r\n") + 2;
  while (line < head_end) {
    const size_t eol = wire.find("\r\n", line);
    const std::string h = wire.substr(line, eol - line);
    std::string name = h.substr(0, h.find(':'));
    for (char& c : name) c = static_cast<char>(std::tolower(c));
    r.headers[name] = h.substr(h.find(':') + 2);
    line = eol + 2;
  }
  std::string body = wire.substr(head_end + 4);
  if (r.headers["transfer-encoding"] == "chunked") {
    ChunkedDecoder d(1 << 30);
    d.feed(body, r.body);
    EXPECT_TRUE(d.done());
  } else {
    r.body = body;
  }
  return r;
}

class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = Engine::load({model_dir(), 64}).release(); }
  static void TearDownTestSuite() { delete engine_; }
  void start(ServiceOptions options = {}, HttpLimits limits = {}, Engine* engine = nullptr) {
    if (options.model_id.empty()) options.model_id = "tiny";
    service_ = std::make_unique<Service>(engine ? *engine : *engine_, options);
    http_ = std::make_unique<HttpServer>(
        limits, [this](const HttpRequest& r, HttpConnection& c) { service_->handle(r, c); });
    http_->bind("127.0.0.1", 0);
    loop_ = std::thread([this] { http_->run(); });
  }
  void TearDown() override { stop(); }
  void stop() {
    if (http_) {
      http_->request_stop();
      loop_.join();
      http_.reset();
    }
    service_.reset();
  }
  Reply call(const std::string& method, const std::string& path, const std::string& body = "",
             const std::string& headers = "") {
    const int fd = connect_to(http_->port());
    send_request(fd, method, path, body, headers);
    return read_reply(fd);
  }
  Reply post(const std::string& path, const Json& body) { return call("POST", path, body.dump()); }
  static std::string text_of(const std::vector<int32_t>& ids) {
    return engine_->text().decode(ids);
  }

  static Engine* engine_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<HttpServer> http_;
  std::thread loop_;
};

Engine* ServiceTest::engine_ = nullptr;

Json completion(const std::vector<int32_t>& prompt, int max_tokens) {
  return Json{{"prompt", prompt}, {"max_tokens", max_tokens}};
}

TEST_F(ServiceTest, PromptAndCompletionMustFitTheContext) {
  EngineOptions eo;
  eo.model_dir = model_dir();
  eo.max_context_tokens = 32;
  std::unique_ptr<Engine> small = Engine::load(eo);
  start({}, {}, small.get());
  Reply r = post("/v1/completions", completion(std::vector<int32_t>(32, 7), 1));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(r.json()["error"]["param"], "prompt");
  r = post("/v1/completions", completion(kPrompt, 9));  // 24 + 9 > 32, asked for explicitly
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(r.json()["error"]["param"], "max_tokens");
  r = post("/v1/completions", completion(kPrompt, 8));  // exactly fills the context
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 8);
  // No max_tokens: the endpoint's default is cut to what the context leaves.
  r = post("/v1/completions", Json{{"prompt", kPrompt}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 8);
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "length");
  stop();  // the service holds a session of `small`
}

TEST_F(ServiceTest, RoutesAndAuthenticates) {
  ServiceOptions o;
  o.api_key = "sekret";
  start(o);
  EXPECT_EQ(call("GET", "/health").status, 200);  // open, for readiness probes
  Reply r = call("GET", "/v1/models");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(
      call("GET", "/v1/models", "", "Authorization: Bearer wrong\r\n").json()["error"]["code"],
      "invalid_api_key");
  // The scheme is case-insensitive (RFC 9110); the key is not.
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: bearer sekret\r\n").status, 200);
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: BEARER sekret\r\n").status, 200);
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: Bearer SEKRET\r\n").status, 401);
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: Basic sekret\r\n").status, 401);
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: Bearersekret\r\n").status, 401);
  EXPECT_EQ(call("GET", "/v1/models", "", "Authorization: Bearer\r\n").status, 401);
  // Two Authorization headers are ambiguous, whichever of them holds the key.
  r = call("GET", "/v1/models", "",
           "Authorization: Bearer sekret\r\nAuthorization: Bearer wrong\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(call("GET", "/v1/models", "",
                 "Authorization: Bearer sekret\r\nAuthorization: Bearer sekret\r\n")
                .status,
            400);
  const std::string auth = "Authorization: Bearer sekret\r\n";
  r = call("GET", "/v1/models", "", auth);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["data"][0]["id"], "tiny");
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_EQ(call("GET", "/v1/models/tiny", "", auth).json()["id"], "tiny");
  EXPECT_EQ(call("GET", "/v1/models/other", "", auth).status, 404);
  EXPECT_EQ(call("GET", "/v1/nothing", "", auth).json()["error"]["code"], "unknown_url");
  r = call("GET", "/v1/chat/completions", "", auth);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "POST");
  r = call("POST", "/v1/completions", "{not json", auth);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["code"], "invalid_json");
}

TEST_F(ServiceTest, GreedyCompletionMatchesTheOracleWholeAndStreamed) {
  ServiceOptions o;
  o.memo = false;
  start(o);
  Reply r = post("/v1/completions", completion(kPrompt, 16));
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], text_of(kGreedy));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 24);
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
  EXPECT_EQ(j["usage"]["total_tokens"], 40);

  Json body = completion(kPrompt, 16);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  bool done = false;
  const std::vector<Json> events = r.events(&done);
  EXPECT_TRUE(done);
  std::string text;
  for (const Json& e : events)
    if (!e["choices"].empty()) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, text_of(kGreedy));
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events.back()["choices"].empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 16);
  EXPECT_TRUE(events.front()["usage"].is_null());
}

TEST_F(ServiceTest, MemoAnswersIdenticalGreedyRequests) {
  start();
  const Json body = completion(kPrompt, 16);
  const Reply first = post("/v1/completions", body);
  Reply second = post("/v1/completions", body);
  EXPECT_EQ(first.headers.count("x-deltafin-memo"), 0u);
  EXPECT_EQ(second.headers["x-deltafin-memo"], "hit");
  EXPECT_EQ(second.json()["choices"], first.json()["choices"]);
  EXPECT_EQ(second.json()["usage"], first.json()["usage"]);
  EXPECT_NE(second.json()["id"], first.json()["id"]);
  EXPECT_EQ(service_->stats().generations, 1);
  EXPECT_EQ(service_->stats().memo_hits, 1);
  // Sampling without a seed is not determined by the request: never memoized.
  Json sampled = body;
  sampled["temperature"] = 1.0;
  post("/v1/completions", sampled);
  EXPECT_EQ(post("/v1/completions", sampled).headers.count("x-deltafin-memo"), 0u);
  EXPECT_EQ(service_->stats().generations, 3);
  // A prompt-only request is made for its effect on the kept state: it always runs.
  post("/v1/completions", completion(kPrompt, 0));
  EXPECT_EQ(post("/v1/completions", completion(kPrompt, 0)).headers.count("x-deltafin-memo"), 0u);
  EXPECT_EQ(service_->stats().generations, 5);
}

TEST_F(ServiceTest, ReuseRunsOnlyNewIdsAndChangesNothing) {
  ServiceOptions o;
  o.memo = false;
  start(o);
  // Prompt only (max_tokens 0), then the whole prompt: the first 10 ids are reused.
  const std::vector<int32_t> head(kPrompt.begin(), kPrompt.begin() + 10);
  EXPECT_EQ(post("/v1/completions", completion(head, 0)).json()["usage"]["completion_tokens"], 0);
  Json j = post("/v1/completions", completion(kPrompt, 16)).json();
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 10);
  EXPECT_EQ(j["choices"][0]["text"], text_of(kGreedy));
  // The next prompt extends prompt + generated ids: 40 reused.
  std::vector<int32_t> next = kPrompt;
  next.insert(next.end(), kGreedy.begin(), kGreedy.end());
  next.insert(next.end(), {65, 66, 67});
  j = post("/v1/completions", completion(next, 12)).json();
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 40);
  const std::string reused = j["choices"][0]["text"];
  // A different prompt drops the state; the same request then runs cold, with the same output.
  post("/v1/completions", completion({1, 2, 3}, 1));
  j = post("/v1/completions", completion(next, 12)).json();
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(j["choices"][0]["text"], reused);
}

TEST_F(ServiceTest, SeededSamplingRepeats) {
  ServiceOptions o;
  o.memo = false;
  start(o);
  Json body = completion(kPrompt, 24);
  body["temperature"] = 1.0;
  body["top_p"] = 0.95;
  body["top_k"] = 50;
  body["seed"] = 7;
  const std::string a = post("/v1/completions", body).json()["choices"][0]["text"];
  const std::string b = post("/v1/completions", body).json()["choices"][0]["text"];
  EXPECT_EQ(a, b);
  body["seed"] = 8;
  EXPECT_NE(post("/v1/completions", body).json()["choices"][0]["text"], a);
}

TEST_F(ServiceTest, StopStringsCutTheText) {
  start();
  const std::string full = text_of(kGreedy);
  // A two-character stop string from the middle of the greedy text.
  size_t i = full.size() / 2;
  while (i < full.size() && (static_cast<unsigned char>(full[i]) & 0xC0) == 0x80) ++i;
  size_t j = i + 1;
  for (int chars = 0; j < full.size(); ++j)
    if ((static_cast<unsigned char>(full[j]) & 0xC0) != 0x80 && ++chars == 2) break;
  const std::string stop = full.substr(i, j - i);
  Json body = completion(kPrompt, 16);
  body["stop"] = {stop};
  const Json r = post("/v1/completions", body).json();
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServiceTest, ChatRendersRunsAndReportsChannels) {
  start();
  const Json body = {{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})},
                     {"max_tokens", 8},
                     {"reasoning_effort", "high"}};
  const Reply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["choices"][0]["message"]["reasoning_content"].is_string());
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const Json input = {
      {"messages", body["messages"]}, {"thinking", true}, {"thinking_effort", "high"}};
  const size_t n_prompt = engine_->text().chat()->render(input).size();
  EXPECT_EQ(j["usage"]["prompt_tokens"], n_prompt);
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  const std::string finish = j["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  // A render the K3 format refuses is a 400 naming the messages.
  const Reply bad =
      post("/v1/chat/completions",
           {{"messages",
             Json::array({{{"role", "tool"}, {"content", "x"}, {"tool_call_id", "nobody"}}})}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json()["error"]["param"], "messages");
}

TEST_F(ServiceTest, RefusesLargeBodies) {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  start({}, limits);
  const Reply r = call("POST", "/v1/completions", std::string(5000, ' '));
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.json()["error"]["code"], "request_too_large");
}

// A generation in flight: a second one gets 429 while /v1/models answers; the first client
// hanging up cancels it promptly, and the slot is free again.
TEST_F(ServiceTest, BusyThenCancelledOnDisconnect) {
  ServiceOptions o;
  o.max_tokens_limit = 1'000'000;
  start(o);
  Json body = completion(kPrompt, 30'000);  // within the default context of 32768
  body["stream"] = true;
  const int fd = connect_to(http_->port());
  send_request(fd, "POST", "/v1/completions", body.dump());
  // Wait for the first event: the generation is running.
  std::string seen;
  char buf[4096];
  while (seen.find("data: ") == std::string::npos) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    ASSERT_GT(n, 0);
    seen.append(buf, n);
  }
  Reply busy = post("/v1/completions", completion(kPrompt, 4));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.headers["retry-after"], "1");
  EXPECT_EQ(busy.json()["error"]["code"], "server_busy");
  EXPECT_EQ(call("GET", "/v1/models").status, 200);
  const auto t0 = std::chrono::steady_clock::now();
  ::close(fd);
  while (service_->stats().cancelled == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(service_->stats().cancelled, 1);
  // The slot frees when the generation returns, right after it notices.
  Reply again;
  for (int i = 0; i < 100; ++i) {
    again = post("/v1/completions", completion({1, 2}, 1));
    if (again.status != 429) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(again.status, 200);
}

// A streamed client that stops reading (a small receive window, nothing read) loses its
// generation within the write timeout, and the slot frees for others.
TEST_F(ServiceTest, SlowReaderIsCancelledAndFreesTheSlot) {
  ServiceOptions o;
  o.max_tokens_limit = 1'000'000;
  HttpLimits limits;
  limits.write_timeout_ms = 300;
  limits.send_buffer_bytes = 4096;
  start(o, limits);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(http_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  Json body = completion(kPrompt, 30'000);
  body["stream"] = true;
  send_request(fd, "POST", "/v1/completions", body.dump());
  const auto t0 = std::chrono::steady_clock::now();
  while (service_->stats().cancelled == 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(service_->stats().cancelled, 1) << "the slow reader still holds its generation";
  Reply again;
  for (int i = 0; i < 100; ++i) {
    again = post("/v1/completions", completion({1, 2}, 1));
    if (again.status != 429) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(again.status, 200);
  ::close(fd);
}

// SIGTERM's path: a generation still running when the grace period ends gets a proper ending.
TEST_F(ServiceTest, StoppingEndsRequestsInFlightProperly) {
  ServiceOptions o;
  o.max_tokens_limit = 1'000'000;
  for (const bool stream : {true, false}) {
    start(o);
    http_->set_shutdown_grace_ms(100);
    Json body = completion(kPrompt, 30'000);
    body["stream"] = stream;
    const int fd = connect_to(http_->port());
    send_request(fd, "POST", "/v1/completions", body.dump());
    const auto t0 = std::chrono::steady_clock::now();
    while (service_->stats().generations == 0 &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // well into the generation
    http_->request_stop();
    const Reply r = read_reply(fd);
    loop_.join();  // run() returned: everything in flight has ended
    http_.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    if (stream) {
      EXPECT_EQ(r.status, 200);
      bool done = false;
      const std::vector<Json> events = r.events(&done);
      ASSERT_FALSE(events.empty());
      EXPECT_EQ(events.back()["error"]["code"], "server_shutting_down") << r.body;
      EXPECT_TRUE(done) << "no [DONE] after the error event";
    } else {
      EXPECT_EQ(r.status, 503) << r.body;
      EXPECT_EQ(r.json()["error"]["code"], "server_shutting_down");
      EXPECT_EQ(r.json()["error"]["type"], "server_error");
    }
    stop();
  }
}

// What a web page could send is refused in OpenAI's error shape; proper clients pass.
TEST_F(ServiceTest, RefusesWhatBrowserPagesSend) {
  start();
  const auto code = [](const Reply& r) { return r.json()["error"]["code"]; };
  for (const char* host : {"localhost", "localhost:8000", "127.0.0.1", "[::1]:8000", "LOCALHOST"})
    EXPECT_EQ(call("GET", "/v1/models", "", std::string("Host: ") + host + "\r\n").status, 200)
        << host;
  for (const char* host :
       {"evil.example", "evil.example:8000", "localhost.evil.example", "127.0.0.1:x", "10.0.0.1"}) {
    const Reply r = call("GET", "/v1/models", "", std::string("Host: ") + host + "\r\n");
    EXPECT_EQ(r.status, 421) << host;
    EXPECT_EQ(code(r), "invalid_host") << host;
  }
  EXPECT_EQ(call("GET", "/health", "", "Host: evil.example\r\n").status, 421);
  // The absolute form names the host itself.
  int fd = connect_to(http_->port());
  std::string raw =
      "GET http://evil.example/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::write(fd, raw.data(), raw.size()), (ssize_t)raw.size());
  EXPECT_EQ(read_reply(fd).status, 421);
  fd = connect_to(http_->port());
  raw = "GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n";  // HTTP/1.1 without Host
  ASSERT_EQ(::write(fd, raw.data(), raw.size()), (ssize_t)raw.size());
  EXPECT_EQ(read_reply(fd).status, 400);
  EXPECT_EQ(call("GET", "/v1/models", "", "Host: localhost\r\nHost: localhost\r\n").status, 400);
  // Cross-origin: an Origin, or a browser's Sec-Fetch-Site on a no-cors request.
  Reply r =
      call("POST", "/v1/completions", completion({1}, 1).dump(), "Origin: http://evil.example\r\n");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(code(r), "origin_not_allowed");
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);
  EXPECT_EQ(call("GET", "/v1/models", "", "Origin: null\r\n").status, 403);
  EXPECT_EQ(call("GET", "/v1/models", "", "Sec-Fetch-Site: cross-site\r\n").status, 403);
  EXPECT_EQ(call("GET", "/v1/models", "", "Sec-Fetch-Site: none\r\n").status, 200);
  r = call("OPTIONS", "/v1/chat/completions", "",
           "Origin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\n");
  EXPECT_EQ(r.status, 403);
  // POST bodies must be declared JSON: what a page can send without a preflight is 415.
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded",
                           "multipart/form-data; boundary=x", "application/jsonx"}) {
    r = call("POST", "/v1/completions", completion({1}, 1).dump(),
             std::string("Content-Type: ") + type + "\r\n");
    EXPECT_EQ(r.status, 415) << type;
    EXPECT_EQ(code(r), "unsupported_media_type") << type;
  }
  fd = connect_to(http_->port());
  raw =
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
      "Content-Length: 2\r\n\r\n{}";
  ASSERT_EQ(::write(fd, raw.data(), raw.size()), (ssize_t)raw.size());
  EXPECT_EQ(read_reply(fd).status, 415);  // no Content-Type at all (a bare Blob)
  EXPECT_EQ(call("POST", "/v1/completions", completion({1}, 1).dump(),
                 "Content-Type: Application/JSON; charset=utf-8\r\n")
                .status,
            200);
}

// --allow-origin: that origin's pages get CORS answers, preflight included; others stay out.
TEST_F(ServiceTest, AllowedOriginGetsCors) {
  ServiceOptions o;
  o.browser.allowed_origins = {"http://localhost:3000"};
  start(o);
  Reply r = call("OPTIONS", "/v1/chat/completions", "",
                 "Origin: http://localhost:3000\r\nAccess-Control-Request-Method: POST\r\n"
                 "Access-Control-Request-Headers: authorization, content-type\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["access-control-allow-origin"], "http://localhost:3000");
  EXPECT_EQ(r.headers["access-control-allow-headers"], "authorization, content-type");
  EXPECT_NE(r.headers["access-control-allow-methods"].find("POST"), std::string::npos);
  r = call("POST", "/v1/completions", completion({1}, 1).dump(),
           "Origin: http://localhost:3000\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["access-control-allow-origin"], "http://localhost:3000");
  EXPECT_EQ(r.headers["vary"], "Origin");
  EXPECT_EQ(call("GET", "/v1/models", "", "Origin: http://localhost:3001\r\n").status, 403);
  stop();
  o.browser.allowed_origins = {"*"};
  start(o);
  r = call("GET", "/v1/models", "", "Origin: http://anywhere.example\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["access-control-allow-origin"], "*");
  // The Host check stays: an allowed origin does not make a rebound name this server's.
  EXPECT_EQ(
      call("GET", "/v1/models", "", "Host: evil.example\r\nOrigin: http://a.example\r\n").status,
      421);
}

}  // namespace
}  // namespace deltafin::server
