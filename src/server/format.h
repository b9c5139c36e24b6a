// The OpenAI response bodies: chat.completion, chat.completion.chunk, text_completion (whole and
// streamed), usage, model list, and server-sent-event framing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/outcome.h"

namespace deltafin::server {

// Fields every response of one request shares.
struct ResponseMeta {
  std::string id;     // "chatcmpl-..." or "cmpl-..."
  int64_t created;    // unix seconds
  std::string model;  // the served model's id
};

nlohmann::ordered_json usage_json(const Usage& usage);

// A whole chat.completion. reasoning_content is present when thinking was on.
nlohmann::ordered_json chat_completion_json(const ResponseMeta& meta, const Outcome& outcome,
                                            bool thinking);
// One chat.completion.chunk. `delta` is the delta object; finish_reason "" = null.
// with_usage_field adds "usage": null, as OpenAI does on every chunk when include_usage is set.
nlohmann::ordered_json chat_chunk_json(const ResponseMeta& meta, nlohmann::ordered_json delta,
                                       std::string_view finish_reason, bool with_usage_field);
// The delta object of one recorded delta; tool calls carry their index among the response's
// calls.
nlohmann::ordered_json chat_delta_json(const Delta& delta, int tool_index);

nlohmann::ordered_json completion_json(const ResponseMeta& meta, const std::string& text,
                                       const Outcome& outcome);
nlohmann::ordered_json completion_chunk_json(const ResponseMeta& meta, const std::string& text,
                                             std::string_view finish_reason, bool with_usage_field);
// The closing chunk of a stream with include_usage: no choices, just usage.
nlohmann::ordered_json usage_chunk_json(const ResponseMeta& meta, const char* object,
                                        const Usage& usage);

// "data: <json>\n\n"; and the stream's end marker.
std::string sse_event(const nlohmann::ordered_json& data);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The text one channel's deltas add up to.
std::string joined(const Outcome& outcome, Delta::Kind kind);

inline constexpr const char* kSystemFingerprint = "deltafin";

}  // namespace deltafin::server
