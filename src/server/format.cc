// JSON shapes follow the OpenAI API reference; "reasoning_content" is the field DeepSeek and
// Moonshot use for the thinking channel, which chat UIs read.
#include "server/format.h"

#include "deltafin/version.h"

namespace deltafin::server {
namespace {

using Json = nlohmann::ordered_json;

std::string fingerprint() { return std::string(kSystemFingerprint) + "-" + kVersion; }

Json head(const ResponseMeta& meta, const char* object) {
  return Json{{"id", meta.id},
              {"object", object},
              {"created", meta.created},
              {"model", meta.model},
              {"system_fingerprint", fingerprint()}};
}

Json finish(std::string_view reason) {
  return reason.empty() ? Json(nullptr) : Json(std::string(reason));
}

Json tool_call_json(const ToolCall& call) {
  return Json{{"id", call.id},
              {"type", "function"},
              {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

std::string joined(const Outcome& outcome, Delta::Kind kind) {
  std::string out;
  for (const Delta& d : outcome.deltas)
    if (d.kind == kind) out += d.text;
  return out;
}

Json usage_json(const Usage& usage) {
  return Json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
              {"completion_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens}}}};
}

Json chat_completion_json(const ResponseMeta& meta, const Outcome& outcome, bool thinking) {
  Json calls = Json::array();
  for (const Delta& d : outcome.deltas)
    if (d.kind == Delta::Kind::kToolCall) calls.push_back(tool_call_json(d.call));
  const std::string content = joined(outcome, Delta::Kind::kContent);
  Json message = {{"role", "assistant"},
                  {"content", content.empty() && !calls.empty() ? Json(nullptr) : Json(content)}};
  if (thinking) message["reasoning_content"] = joined(outcome, Delta::Kind::kReasoning);
  if (!calls.empty()) message["tool_calls"] = std::move(calls);
  Json out = head(meta, "chat.completion");
  out["choices"] = Json::array({Json{{"index", 0},
                                     {"message", std::move(message)},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish(outcome.finish_reason)}}});
  out["usage"] = usage_json(outcome.usage);
  return out;
}

Json chat_delta_json(const Delta& delta, int tool_index) {
  switch (delta.kind) {
    case Delta::Kind::kReasoning:
      return Json{{"reasoning_content", delta.text}};
    case Delta::Kind::kContent:
      return Json{{"content", delta.text}};
    case Delta::Kind::kToolCall: {
      Json call = tool_call_json(delta.call);
      Json indexed = {{"index", tool_index}};
      indexed.update(call);
      return Json{{"tool_calls", Json::array({std::move(indexed)})}};
    }
  }
  return Json::object();
}

Json chat_chunk_json(const ResponseMeta& meta, Json delta, std::string_view finish_reason,
                     bool with_usage_field) {
  Json out = head(meta, "chat.completion.chunk");
  out["choices"] = Json::array({Json{{"index", 0},
                                     {"delta", std::move(delta)},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish(finish_reason)}}});
  if (with_usage_field) out["usage"] = nullptr;
  return out;
}

Json completion_json(const ResponseMeta& meta, const std::string& text, const Outcome& outcome) {
  Json out = head(meta, "text_completion");
  out["choices"] = Json::array({Json{{"text", text},
                                     {"index", 0},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish(outcome.finish_reason)}}});
  out["usage"] = usage_json(outcome.usage);
  return out;
}

Json completion_chunk_json(const ResponseMeta& meta, const std::string& text,
                           std::string_view finish_reason, bool with_usage_field) {
  Json out = head(meta, "text_completion");
  out["choices"] = Json::array({Json{{"text", text},
                                     {"index", 0},
                                     {"logprobs", nullptr},
                                     {"finish_reason", finish(finish_reason)}}});
  if (with_usage_field) out["usage"] = nullptr;
  return out;
}

Json usage_chunk_json(const ResponseMeta& meta, const char* object, const Usage& usage) {
  Json out = head(meta, object);
  out["choices"] = Json::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const Json& data) {
  // Invalid UTF-8 cannot reach here (decoding replaces it), but never let dump() throw mid-stream.
  return "data: " + data.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

}  // namespace deltafin::server
