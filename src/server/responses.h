// The OpenAI Responses API (/v1/responses) on top of the chat path: a request becomes the
// equivalent chat request (so the same prompt ids and output), and an Outcome is written back as
// a Response object or as its typed stream events.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/format.h"
#include "server/outcome.h"
#include "server/request.h"

namespace deltafin::server {

struct ResponsesRequest {
  ChatRequest chat;  // what the chat path runs
  // The request settings a Response object repeats: instructions, max_output_tokens, tools, ...
  nlohmann::ordered_json echo;
};

// Validates a /v1/responses body (unknown or unhonourable fields are 400s naming them, as for
// chat) and translates it; throws ApiError.
ResponsesRequest parse_responses_request(std::string_view body, const RequestLimits& limits);

// Builds one response's output items from its deltas, in order, and the stream events that say
// so. Reasoning is a "reasoning" item with reasoning_text content, text a "message" item with one
// output_text part, each tool call a "function_call" item.
class ResponsesWriter {
 public:
  using NewId = std::function<std::string(const char* prefix)>;  // "msg_" -> "msg_..."
  ResponsesWriter(nlohmann::ordered_json echo, NewId new_id)
      : echo_(std::move(echo)), new_id_(std::move(new_id)) {}

  // Each returns the SSE text of the events it makes ("event: T\ndata: {...}\n\n" each).
  std::string begin(const ResponseMeta& meta);  // response.created, response.in_progress
  std::string delta(const Delta& delta);
  std::string end(const ResponseMeta& meta, const Outcome& outcome);  // response.completed
  // A generation that failed mid-stream: the open item ends incomplete, then response.failed
  // with the Response's status "failed" and its error {code, message}.
  std::string fail(const ResponseMeta& meta, const std::string& code, const std::string& message);

  // The whole Response object of `outcome`, as a non-streamed request gets it.
  nlohmann::ordered_json whole(const ResponseMeta& meta, const Outcome& outcome);

 private:
  enum class Open { kNone, kReasoning, kText };
  std::string event(nlohmann::ordered_json body);
  std::string close_item(const char* status);
  nlohmann::ordered_json response(const ResponseMeta& meta, const Outcome* outcome) const;
  bool failed_ = false;

  nlohmann::ordered_json echo_;
  NewId new_id_;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();
  Open open_ = Open::kNone;
  std::string open_text_;
  int64_t sequence_ = 0;
};

}  // namespace deltafin::server
