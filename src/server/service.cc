// Routing, authentication, the generation slot, state reuse, streaming and the memo. Validation
// lives in request.cc, response shapes in format.cc, ids-to-text behind the engine's Text.
#include "server/service.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <random>
#include <span>

#include "base/error.h"
#include "base/log.h"
#include "base/stopwatch.h"
#include "server/api_error.h"
#include "server/format.h"
#include "server/responses.h"

namespace deltafin::server {

using Json = nlohmann::ordered_json;

struct Service::Job {
  bool chat = true;
  GenerationParams gen;
  std::vector<int32_t> prompt;
  bool thinking = false;
  bool parallel_tool_calls = true;
  std::string echo_text;  // completions with echo: the prompt, shown first
  std::string memo_key;   // "" = the output is not fully determined, so never memoized
  ResponseMeta meta;
  std::shared_ptr<ResponsesWriter> responses;  // set: a chat job answered as /v1/responses
};

namespace {

constexpr const char* kJson = "application/json";

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

// The token of "Bearer TOKEN"; the scheme is case-insensitive and followed by one or more spaces
// (RFC 9110 11.4). Another scheme, or none, gives "", which never matches a key.
std::string_view bearer_token(std::string_view auth) {
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() <= kScheme.size() || auth[kScheme.size()] != ' ') return {};
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(auth[i])) != kScheme[i]) return {};
  auth.remove_prefix(kScheme.size());
  while (!auth.empty() && auth.front() == ' ') auth.remove_prefix(1);
  return auth;
}

void send_error(HttpConnection& conn, const ApiError& error,
                const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  if (conn.responded()) {
    // Mid-stream: the status is gone already; the openai SDKs raise an APIError on this event.
    conn.write(sse_event(Json::parse(error_json(error))));
    conn.finish();
    conn.set_keep_alive(false);
    return;
  }
  conn.send(error.status, kJson, error_json(error), extra);
}

// Writes one response's stream events. Keeps the tool-call index and the usage-field rule.
class EventWriter {
 public:
  EventWriter(HttpConnection& conn, const ResponseMeta& meta, bool chat, bool include_usage,
              ResponsesWriter* responses = nullptr)
      : conn_(conn),
        meta_(meta),
        chat_(chat),
        include_usage_(include_usage),
        responses_(responses) {}

  bool begin(const std::string& echo_text,
             const std::vector<std::pair<std::string, std::string>>& headers) {
    if (!conn_.begin_stream(200, "text/event-stream", headers)) return false;
    if (responses_) return conn_.write(responses_->begin(meta_));
    if (chat_)
      return send(
          chat_chunk_json(meta_, Json{{"role", "assistant"}, {"content", ""}}, "", include_usage_));
    return echo_text.empty() || send(completion_chunk_json(meta_, echo_text, "", include_usage_));
  }
  bool delta(const Delta& d) {
    if (responses_) return conn_.write(responses_->delta(d));
    if (!chat_) return send(completion_chunk_json(meta_, d.text, "", include_usage_));
    const int index = d.kind == Delta::Kind::kToolCall ? n_tool_calls_++ : 0;
    return send(chat_chunk_json(meta_, chat_delta_json(d, index), "", include_usage_));
  }
  bool end(const Outcome& outcome) {
    if (responses_) return conn_.write(responses_->end(meta_, outcome)) && conn_.finish();
    bool ok =
        chat_ ? send(chat_chunk_json(meta_, Json::object(), outcome.finish_reason, include_usage_))
              : send(completion_chunk_json(meta_, "", outcome.finish_reason, include_usage_));
    if (ok && include_usage_)
      ok = send(usage_chunk_json(meta_, chat_ ? "chat.completion.chunk" : "text_completion",
                                 outcome.usage));
    return ok && conn_.write(kSseDone) && conn_.finish();
  }

 private:
  bool send(const Json& event) { return conn_.write(sse_event(event)); }

  HttpConnection& conn_;
  const ResponseMeta& meta_;
  bool chat_, include_usage_;
  ResponsesWriter* responses_;
  int n_tool_calls_ = 0;
};

void send_whole(HttpConnection& conn, const ResponseMeta& meta, bool chat, bool thinking,
                const std::string& echo_text, const Outcome& outcome,
                const std::vector<std::pair<std::string, std::string>>& headers,
                ResponsesWriter* responses = nullptr) {
  const Json body =
      responses ? responses->whole(meta, outcome)
      : chat    ? chat_completion_json(meta, outcome, thinking)
             : completion_json(meta, echo_text + joined(outcome, Delta::Kind::kContent), outcome);
  conn.send(200, kJson, body.dump(-1, ' ', false, Json::error_handler_t::replace), headers);
}

}  // namespace

Service::Service(Engine& engine, ServiceOptions options)
    : engine_(engine),
      text_(engine.text()),
      options_(std::move(options)),
      created_(static_cast<int64_t>(std::time(nullptr))),
      session_(engine.new_session()),
      memo_(options_.memo ? options_.memo_entries : 0, options_.memo_bytes),
      random_state_(std::random_device{}()) {
  limits_.max_tokens_limit = options_.max_tokens_limit;
  limits_.vocab_size = engine.info().vocab_size;
  limits_.model_names = options_.model_names;
  limits_.model_names.insert(limits_.model_names.begin(), options_.model_id);
}

std::string Service::random_id(const char* prefix, size_t n_chars) {
  static constexpr char kAlphabet[] =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::lock_guard<std::mutex> lock(random_mu_);
  std::string out = prefix;
  for (size_t i = 0; i < n_chars; ++i) {
    random_state_ = random_state_ * 6364136223846793005ull + 1442695040888963407ull;
    out.push_back(kAlphabet[(random_state_ >> 33) % (sizeof(kAlphabet) - 1)]);
  }
  return out;
}

void Service::handle(const HttpRequest& request, HttpConnection& conn) {
  try {
    if (apply_browser_policy(options_.browser, request, conn)) return;  // a CORS preflight
    if (request.path == "/health") {
      if (request.method != "GET") throw ApiError{405, "use GET /health"};
      conn.send(200, kJson, R"({"status":"ok"})");
      return;
    }
    if (!options_.api_key.empty()) {
      size_t n_auth = 0;
      for (const auto& [name, value] : request.headers) n_auth += name == "authorization";
      if (n_auth > 1)  // which one would count is ambiguous between proxies and servers
        throw ApiError{400, "Send one Authorization header, not several.", "invalid_request_error",
                       "", ""};
      const std::string* auth = request.header("authorization");
      if (!auth)
        throw ApiError{401,
                       "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.",
                       "invalid_request_error", "", ""};
      if (!constant_time_equal(bearer_token(*auth), options_.api_key))
        throw ApiError{401, "Incorrect API key provided.", "invalid_request_error", "",
                       "invalid_api_key"};
    }
    const bool models_path =
        request.path == "/v1/models" || request.path.rfind("/v1/models/", 0) == 0;
    const bool chat_path = request.path == "/v1/chat/completions";
    const bool completions_path = request.path == "/v1/completions";
    const bool responses_path = request.path == "/v1/responses";
    if (!models_path && !chat_path && !completions_path && !responses_path)
      throw ApiError{404, base::str_cat("Invalid URL (", request.method, " ", request.path, ")"),
                     "invalid_request_error", "", "unknown_url"};
    const char* want = models_path ? "GET" : "POST";
    if (request.method != want)
      throw ApiError{405, base::str_cat("use ", want, " ", request.path), "invalid_request_error",
                     "", "method_not_allowed"};
    if (models_path) return models(request, conn);
    if (chat_path) return chat(request, conn);
    if (responses_path) return responses(request, conn);
    return completions(request, conn);
  } catch (const ApiError& e) {
    if (e.status >= 500)
      base::log_warn("server: ", request.method, " ", request.path, ": ", e.message);
    std::vector<std::pair<std::string, std::string>> extra;
    if (e.status == 429) extra.emplace_back("Retry-After", "1");
    if (e.status == 405)
      extra.emplace_back(
          "Allow",
          request.path == "/health" || request.path.rfind("/v1/models", 0) == 0 ? "GET" : "POST");
    send_error(conn, e, extra);
  }
}

void Service::models(const HttpRequest& request, HttpConnection& conn) {
  const Json model = {
      {"id", options_.model_id},
      {"object", "model"},
      {"created", created_},
      {"owned_by", "deltafin"},
      {"deltafin", {{"spine_dtype", options_.spine_dtype}, {"lossy", options_.lossy}}}};
  if (request.path == "/v1/models") {
    conn.send(200, kJson, Json{{"object", "list"}, {"data", Json::array({model})}}.dump());
    return;
  }
  const std::string name = request.path.substr(std::string("/v1/models/").size());
  if (std::find(limits_.model_names.begin(), limits_.model_names.end(), name) ==
      limits_.model_names.end())
    throw ApiError{404, base::str_cat("The model '", name, "' does not exist"),
                   "invalid_request_error", "model", "model_not_found"};
  conn.send(200, kJson, model.dump());
}

void Service::responses(const HttpRequest& request, HttpConnection& conn) {
  ResponsesRequest r = parse_responses_request(request.body, limits_);
  Job job;
  job.responses = std::make_shared<ResponsesWriter>(
      std::move(r.echo), [this](const char* prefix) { return random_id(prefix, 24); });
  job.meta = ResponseMeta{random_id("resp_", 24), 0, options_.model_id};
  run_chat(r.chat, "responses\n" + request.body, job, conn);
}

void Service::chat(const HttpRequest& request, HttpConnection& conn) {
  ChatRequest r = parse_chat_request(request.body, limits_);
  Job job;
  job.meta = ResponseMeta{random_id("chatcmpl-", 24), 0, options_.model_id};
  run_chat(r, "chat\n" + request.body, job, conn);
}

void Service::run_chat(const ChatRequest& r, std::string memo_key, Job& job, HttpConnection& conn) {
  job.chat = true;
  job.gen = r.gen;
  job.thinking = r.thinking;
  job.parallel_tool_calls = r.parallel_tool_calls;
  const ChatFormat* format = text_.chat();
  if (format == nullptr)
    throw ApiError{400,
                   base::str_cat("the model '", options_.model_id, "' (", engine_.info().arch,
                                 ") has no chat format here; use /v1/completions"),
                   "invalid_request_error", "messages", "unsupported_model"};
  try {
    job.prompt = format->render(r.render_input);
  } catch (const base::Error& e) {
    throw bad_request(job.responses ? "input" : "messages", e.what());
  }
  if (job.gen.deterministic() && options_.memo) job.memo_key = std::move(memo_key);
  execute(job, conn);
}

void Service::completions(const HttpRequest& request, HttpConnection& conn) {
  CompletionRequest r = parse_completion_request(request.body, limits_);
  Job job;
  job.chat = false;
  job.gen = r.gen;
  job.prompt = r.prompt_text ? text_.encode(*r.prompt_text) : r.prompt_ids;
  if (r.echo) job.echo_text = r.prompt_text ? *r.prompt_text : text_.decode(r.prompt_ids);
  // max_tokens 0 is asked for its effect (the prompt kept as state), which a memo hit would skip.
  if (job.gen.deterministic() && options_.memo && job.gen.max_tokens > 0)
    job.memo_key = "completions\n" + request.body;
  job.meta = ResponseMeta{random_id("cmpl-", 24), 0, options_.model_id};
  execute(job, conn);
}

void Service::replay(const Job& job, const Outcome& recorded, HttpConnection& conn) {
  Outcome outcome = recorded;
  for (Delta& d : outcome.deltas)  // tool-call ids stay unique per response
    if (d.kind == Delta::Kind::kToolCall) d.call.id = random_id("call_", 24);
  const std::vector<std::pair<std::string, std::string>> headers = {{"X-Deltafin-Memo", "hit"}};
  if (!job.gen.stream) {
    send_whole(conn, job.meta, job.chat, job.thinking, job.echo_text, outcome, headers,
               job.responses.get());
    return;
  }
  EventWriter events(conn, job.meta, job.chat, job.gen.include_usage, job.responses.get());
  if (!events.begin(job.echo_text, headers)) return;
  for (const Delta& d : outcome.deltas)
    if (!events.delta(d)) return;
  events.end(outcome);
}

// Prompt and completion must fit the engine's context (its memory plan holds the attention cache
// for that many positions): a prompt that fills it, or an explicit max_tokens that would overrun
// it, is refused as OpenAI does; a default max_tokens is cut to what is left.
void Service::fit_context(Job& job) const {
  const int64_t context = engine_.info().max_context_tokens;
  const int64_t prompt = static_cast<int64_t>(job.prompt.size());
  const char* param = job.responses ? "input" : job.chat ? "messages" : "prompt";
  if (context <= 0) return;  // an engine that states no limit
  if (prompt >= context) {
    throw ApiError{400,
                   base::str_cat("the prompt is ", prompt,
                                 " tokens, and this server's context holds ", context,
                                 " tokens for prompt and completion together "
                                 "(deltafin serve --max-context)"),
                   "invalid_request_error", param, "context_length_exceeded"};
  }
  if (prompt + job.gen.max_tokens <= context) return;
  if (job.gen.max_tokens_given) {
    throw ApiError{400,
                   base::str_cat("the prompt is ", prompt, " tokens and max_tokens asks for ",
                                 job.gen.max_tokens, " more, beyond this server's context of ",
                                 context, " tokens (deltafin serve --max-context)"),
                   "invalid_request_error", job.responses ? "max_output_tokens" : "max_tokens",
                   "context_length_exceeded"};
  }
  job.gen.max_tokens = static_cast<int>(context - prompt);
}

void Service::execute(Job& job, HttpConnection& conn) {
  job.meta.created = static_cast<int64_t>(std::time(nullptr));
  fit_context(job);
  if (!job.memo_key.empty()) {
    if (std::optional<Outcome> hit = memo_.find(job.memo_key)) {
      ++stats_.memo_hits;
      replay(job, *hit, conn);
      return;
    }
  }
  std::unique_lock<std::mutex> slot(generation_mu_, std::try_to_lock);
  if (!slot.owns_lock()) {
    ++stats_.busy_refusals;
    throw ApiError{429,
                   "the server is generating for another request; it runs one generation at a "
                   "time. Retry when it is done.",
                   "rate_limit_error", "", "server_busy"};
  }
  ++stats_.generations;

  GenerateOptions options;
  options.max_new_tokens = job.gen.max_tokens;
  options.stop_at_eos = true;
  options.temperature = static_cast<float>(job.gen.temperature);
  options.top_p = static_cast<float>(job.gen.top_p);
  options.top_k = job.gen.top_k;
  options.seed = job.gen.seed ? *job.gen.seed : std::random_device{}();
  options.speculation = options_.speculation;
  options.speculation.chat = job.chat;
  bool cancelled = false;
  options.cancel = [&] { return cancelled = cancelled || conn.client_gone(); };
  std::unique_ptr<TextStream> pipeline =
      job.chat ? text_.chat()->response({job.thinking, job.gen.stop, !job.parallel_tool_calls,
                                         [this] { return random_id("call_", 24); }})
               : text_.completion(job.gen.stop);

  Outcome outcome;
  std::optional<EventWriter> events;
  if (job.gen.stream) {
    events.emplace(conn, job.meta, job.chat, job.gen.include_usage, job.responses.get());
    if (!events->begin(job.echo_text, {})) return;
  }
  std::vector<Delta> fresh;
  const auto emit = [&] {
    for (Delta& d : fresh) {
      if (events && !events->delta(d)) cancelled = true;
      outcome.deltas.push_back(std::move(d));
    }
    fresh.clear();
  };
  // State reuse: a prompt that extends the ids the session kept from the last request runs only
  // its new ids (an equal prompt runs none); anything else starts the session over.
  if (!options_.reuse) session_->reset();
  const int64_t reused = session_->sync(job.prompt);
  const int64_t n_prompt = static_cast<int64_t>(job.prompt.size());
  const base::Stopwatch since_prompt;
  const auto ms_since = [&since_prompt] { return since_prompt.elapsed_ms(); };
  double first_token_ms = -1;  // from here to the first generated id: the prompt's cost
  GenerateResult result;
  try {
    result = session_->generate(std::span(job.prompt).subspan(reused), options, [&](int32_t id) {
      if (first_token_ms < 0) first_token_ms = ms_since();
      // Checked before the id is run through the model: a client that left costs nothing more.
      if (conn.client_gone()) {
        cancelled = true;
        return false;
      }
      const bool more = pipeline->push(id, fresh);
      emit();
      return more && !cancelled;
    });
  } catch (const std::exception& e) {
    session_->reset();  // what it holds is no longer known
    base::log_warn("server: generation failed: ", e.what());
    const ApiError failed{500, base::str_cat("generation failed: ", e.what()), "server_error"};
    if (job.responses && conn.responded()) {
      // Mid-stream on /v1/responses: the Responses API's own ending, not chat's error event.
      conn.write(job.responses->fail(job.meta, "server_error", failed.message));
      conn.finish();
    } else {
      send_error(conn, failed);
    }
    conn.set_keep_alive(false);
    return;
  }
  if (first_token_ms < 0) first_token_ms = ms_since();  // nothing generated: the prompt alone
  const double total_ms = ms_since();
  const char* what = job.chat ? "chat" : "completion";
  if (cancelled) {
    ++stats_.cancelled;
    conn.set_keep_alive(false);
    if (conn.server_cancelling()) {
      // Shutdown: a proper ending, a whole error body or an error event and [DONE].
      base::log_info("server: ", what, " cancelled (server stopping) after ", result.ids.size(),
                     " tokens");
      const ApiError stopping{503,
                              base::str_cat("the server is shutting down; the generation stopped "
                                            "after ",
                                            result.ids.size(), " tokens"),
                              "server_error", "", "server_shutting_down"};
      if (!conn.responded()) {
        conn.send(stopping.status, kJson, error_json(stopping));
      } else if (job.responses) {
        if (conn.write(job.responses->fail(job.meta, "server_shutting_down", stopping.message)))
          conn.finish();
      } else if (conn.write(sse_event(Json::parse(error_json(stopping))))) {
        if (conn.write(kSseDone)) conn.finish();
      }
      return;
    }
    if (conn.write_timed_out()) {
      base::log_info("server: ", what, " cancelled (slow client: a write was not taken within ",
                     "--write-timeout-ms) after ", result.ids.size(), " tokens");
    } else {
      base::log_info("server: ", what, " cancelled (client gone) after ", result.ids.size(),
                     " tokens");
    }
    return;
  }
  pipeline->finish(fresh);
  emit();
  const StopReason stop = result.stop;
  const bool length = stop == StopReason::kMaxTokens || stop == StopReason::kContextFull;
  if (pipeline->saw_tool_call() && !length) {
    outcome.finish_reason = "tool_calls";
  } else if (length && !pipeline->stopped_by_string()) {
    outcome.finish_reason = "length";
  } else {
    outcome.finish_reason = "stop";
  }
  outcome.usage.prompt_tokens = n_prompt;
  outcome.usage.completion_tokens = static_cast<int64_t>(result.ids.size());
  outcome.usage.cached_tokens = reused;
  outcome.usage.reasoning_tokens = pipeline->reasoning_tokens();
  const double decode_ms = total_ms - first_token_ms;
  base::log_info(
      "server: ", what, ": prompt ", n_prompt, " tokens (", reused, " reused), first token after ",
      first_token_ms, " ms, ", result.ids.size(), " tokens in ", total_ms, " ms",
      result.ids.size() > 1 ? base::str_cat(" (", (result.ids.size() - 1) * 1000.0 / decode_ms,
                                            " tok/s after the first)")
                            : std::string(),
      ", finish ", outcome.finish_reason);
  // The model is free once the last id is out: release the slot before the final bytes go out,
  // or a client that sends its next request the moment it reads them would get a spurious 429.
  slot.unlock();
  if (events) {
    events->end(outcome);
  } else {
    send_whole(conn, job.meta, job.chat, job.thinking, job.echo_text, outcome, {},
               job.responses.get());
  }
  if (!job.memo_key.empty()) memo_.insert(job.memo_key, outcome);
}

}  // namespace deltafin::server
