// The OpenAI request bodies the server accepts, parsed and validated before any work starts:
// every field is either honoured exactly or refused with a 400 naming it; unknown fields are
// refused too, so a client never silently gets something other than what it asked for.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"

namespace deltafin::server {

// What the server allows, for validation.
struct RequestLimits {
  int max_tokens_limit = 4096;           // ceiling on max_tokens / max_completion_tokens
  int64_t vocab_size = 0;                // token-id prompts must lie in [0, vocab_size)
  std::vector<std::string> model_names;  // accepted values of "model" (absent is fine)
};

// Decoding parameters shared by both endpoints.
struct GenerationParams {
  int max_tokens = 0;             // resolved: the request's value or the endpoint's default
  bool max_tokens_given = false;  // the request named max_tokens (or max_completion_tokens)
  double temperature = 0.0;       // 0 = greedy (the default)
  double top_p = 1.0;
  int top_k = 0;  // 0 = no cut
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // at most 4 non-empty strings, matched on decoded text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage

  // Whether the output is fully determined by the request (greedy, or sampled with a seed).
  bool deterministic() const { return temperature == 0.0 || seed.has_value(); }
};

struct ChatRequest {
  GenerationParams gen;
  // The chat format's render input (ChatFormat::render): messages (normalized: developer ->
  // system), tools, thinking, thinking_effort, tool_choice, response_format.
  nlohmann::ordered_json render_input;
  bool thinking = true;
  bool has_tools = false;
  bool parallel_tool_calls = true;  // false: the response ends after the first tool call
};

struct CompletionRequest {
  GenerationParams gen;
  std::optional<std::string> prompt_text;  // a string prompt, tokenized as ordinary text
  std::vector<int32_t> prompt_ids;         // or token ids as given
  bool echo = false;
};

// Parse and validate a body; throw ApiError (400 for anything malformed, unknown or unsupported;
// 404 for a model this server does not serve).
ChatRequest parse_chat_request(std::string_view body, const RequestLimits& limits);
CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits);

// For endpoints translated into these (/v1/responses): a body parsed under the same rules (depth
// bound, 16.0 as 16), throwing ApiError 400; and `read` run with the readers' FieldErrors turned
// into 400s whose param is the field path.
nlohmann::ordered_json parse_request_body(std::string_view body);
template <typename Read>
auto with_field_errors(Read&& read) -> decltype(read());

namespace detail {
[[noreturn]] void rethrow_field_error();  // the FieldError in flight, as its ApiError
}

template <typename Read>
auto with_field_errors(Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception&) {
    detail::rethrow_field_error();
  }
}

}  // namespace deltafin::server
