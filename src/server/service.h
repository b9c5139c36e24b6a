// The OpenAI-compatible API over one engine: /v1/models, /v1/chat/completions,
// /v1/completions and /v1/responses, one generation at a time (a second gets 429 while the others
// keep answering), cancellation when the client goes, conversation-state reuse and the
// exact-response memo.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "deltafin/engine.h"
#include "server/browser_guard.h"
#include "server/http.h"
#include "server/memo.h"
#include "server/outcome.h"
#include "server/request.h"

namespace deltafin::server {

struct ServiceOptions {
  std::string model_id;                  // what /v1/models lists
  std::vector<std::string> model_names;  // further accepted values of "model"
  // The engine's spine precision, listed by /v1/models; lossy engines (the int8 spine) also carry
  // "-int8-spine" in model_id (serve() adds it), so every response's "model" says so.
  std::string spine_dtype = "bf16";
  bool lossy = false;
  int max_tokens_limit = 4096;  // ceiling on max_tokens per request
  bool memo = true;
  size_t memo_entries = 32;
  size_t memo_bytes = 64u << 20;
  bool reuse = true;               // conversation-state reuse (the session's prefix sync)
  std::string api_key;             // "" = no authentication
  BrowserPolicy browser;           // Host, Origin and Content-Type checks, CORS
  SpeculationOptions speculation;  // every generation's (the ids are the same either way)
};

// Counters for logs and tests.
struct ServiceStats {
  std::atomic<int64_t> generations{0};  // requests that ran the model
  std::atomic<int64_t> memo_hits{0};
  std::atomic<int64_t> busy_refusals{0};  // 429s
  std::atomic<int64_t> cancelled{0};      // generations ended because the client went away
};

class Service {
 public:
  // Text goes through engine.text() (throws base::Error when the folder has no tokenizer).
  Service(Engine& engine, ServiceOptions options);

  // The HttpServer handler: answers one request on `conn`.
  void handle(const HttpRequest& request, HttpConnection& conn);

  const ServiceStats& stats() const { return stats_; }
  const ResponseMemo& memo() const { return memo_; }

 private:
  struct Job;
  void models(const HttpRequest& request, HttpConnection& conn);
  void chat(const HttpRequest& request, HttpConnection& conn);
  void completions(const HttpRequest& request, HttpConnection& conn);
  void responses(const HttpRequest& request, HttpConnection& conn);  // runs as a chat job
  // The shared tail of chat and responses: render, memo key (when deterministic), execute.
  void run_chat(const ChatRequest& r, std::string memo_key, Job& job, HttpConnection& conn);
  void fit_context(Job& job) const;  // throws ApiError 400 when the prompt cannot fit
  void execute(Job& job, HttpConnection& conn);
  // Formats a finished outcome (from the memo) as the job's response.
  void replay(const Job& job, const Outcome& outcome, HttpConnection& conn);
  std::string random_id(const char* prefix, size_t n_chars);

  Engine& engine_;
  const Text& text_;
  ServiceOptions options_;
  RequestLimits limits_;
  int64_t created_;  // start time, the model's "created"

  std::mutex generation_mu_;          // held by the one running generation
  std::unique_ptr<Session> session_;  // guarded by generation_mu_; kept between requests
  ResponseMemo memo_;
  std::mutex random_mu_;
  uint64_t random_state_;
  ServiceStats stats_;
};

}  // namespace deltafin::server
