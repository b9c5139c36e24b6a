// Validation of /v1/chat/completions and /v1/completions bodies, field by field, with
// base::JsonObject; its FieldErrors become 400s whose param is the field path.
#include "server/request.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "base/error.h"
#include "base/json_fields.h"
#include "server/api_error.h"

namespace deltafin::server {
namespace {

using base::Json;
using base::str_cat;

constexpr size_t kMaxStopStrings = 4;
constexpr size_t kMaxStopBytes = 1024;           // matching costs up to its square per token
constexpr int kCompletionDefaultMaxTokens = 16;  // OpenAI's default for /v1/completions
constexpr size_t kMaxJsonDepth = 64;

// Fields the server knows but cannot honour; the message says why.
const std::map<std::string, std::string>& unsupported() {
  static const std::map<std::string, std::string> m = {
      {"functions", "the legacy 'functions' parameter is not supported; use 'tools'"},
      {"function_call", "the legacy 'function_call' parameter is not supported; use 'tool_choice'"},
      {"audio", "audio output is not supported"},
      {"prediction", "predicted outputs are not supported"},
      {"web_search_options", "web search is not supported"},
      {"best_of", "best_of other than 1 is not supported"},
      {"suffix", "suffix (insertion) is not supported"},
      {"verbosity", "verbosity is not supported"},
      {"logprobs", "logprobs are not supported"},
      {"top_logprobs", "logprobs are not supported"},
      {"frequency_penalty", "frequency_penalty is not supported (only 0)"},
      {"presence_penalty", "presence_penalty is not supported (only 0)"},
      {"logit_bias", "logit_bias is not supported"},
      {"store", "stored completions are not supported"},
  };
  return m;
}

using base::describe_json;
using base::FieldProblem;
using base::JsonField;
using base::JsonObject;

// Request bodies take 16.0 as the integer 16: JSON has one number type, and clients send either.
const base::JsonReadOptions kReadOptions{"", true};

// A FieldError from the reader as the 400 it is: `param` is the field path, `code` the kind.
ApiError api_error(const base::FieldError& e) {
  const char* code = "invalid_value";
  switch (e.problem()) {
    case FieldProblem::kSyntax:
      code = "invalid_json";
      break;
    case FieldProblem::kWrongType:
      code = "invalid_type";
      break;
    case FieldProblem::kUnknown:
      code = "unknown_parameter";
      break;
    case FieldProblem::kUnsupported:
      code = "unsupported_parameter";
      break;
    case FieldProblem::kMissing:
    case FieldProblem::kOutOfRange:
    case FieldProblem::kInvalid:
      break;
  }
  return bad_request(e.path(),
                     e.path().empty() ? str_cat("the request body: ", e.what()) : e.what(), code);
}

// An element checked under its parameter's name (`stop`, `prompt`), as OpenAI reports it.
JsonField as_param(const Json& value, const JsonField& param) {
  return JsonField(value, param.path(), param.options());
}

void check_model(const JsonObject& f, const RequestLimits& limits) {
  const std::optional<JsonField> model = f.get("model");
  if (!model) return;
  const std::string& name = model->string();
  for (const std::string& ok : limits.model_names)
    if (name == ok) return;
  std::string served;
  for (const std::string& ok : limits.model_names)
    served += (served.empty() ? "'" : ", '") + ok + "'";
  throw ApiError{404, str_cat("The model '", name, "' does not exist; this server serves ", served),
                 "invalid_request_error", "model", "model_not_found"};
}

// Fields both endpoints share. `default_max` applies when no max is given.
GenerationParams parse_generation(const JsonObject& f, const RequestLimits& limits, int default_max,
                                  int min_max_tokens) {
  GenerationParams g;
  g.stream = f.boolean_or("stream", false);
  if (const std::optional<JsonField> v = f.get("stream_options")) {
    if (!g.stream)
      throw bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    const JsonObject o = v->object();
    g.include_usage = o.boolean_or("include_usage", false);
    if (o.boolean_or("include_obfuscation", false))
      throw bad_request("stream_options.include_obfuscation",
                        "stream obfuscation is not supported; set it to false or leave it out",
                        "unsupported_parameter");
    o.finish();
  }
  std::optional<int64_t> max_tokens;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const std::optional<JsonField> v = f.get(key);
    if (!v) continue;
    const int64_t n = v->integer(min_max_tokens, std::numeric_limits<int32_t>::max());
    if (max_tokens && *max_tokens != n)
      throw bad_request(key, "'max_tokens' and 'max_completion_tokens' disagree; give one");
    max_tokens = n;
    if (n > limits.max_tokens_limit)
      throw bad_request(key, str_cat("'", key, "' is ", n, " but this server generates at most ",
                                     limits.max_tokens_limit,
                                     " tokens per request (deltafin serve --max-tokens-limit)"));
  }
  g.max_tokens =
      static_cast<int>(max_tokens.value_or(std::min(default_max, limits.max_tokens_limit)));
  g.max_tokens_given = max_tokens.has_value();
  if (const std::optional<JsonField> v = f.get("temperature")) g.temperature = v->number(0, 2);
  if (const std::optional<JsonField> v = f.get("top_p")) g.top_p = v->number(0, 1);
  if (const std::optional<JsonField> v = f.get("top_k")) {
    const int64_t k = v->integer(-1, std::numeric_limits<int32_t>::max());
    g.top_k = k < 0 ? 0 : static_cast<int>(k);  // -1 means "no cut", as in vLLM
  }
  if (const std::optional<JsonField> v = f.get("seed")) {
    if (v->json().is_number_unsigned())
      g.seed = v->json().get<uint64_t>();
    else
      g.seed = static_cast<uint64_t>(
          v->integer(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  }
  if (const std::optional<JsonField> v = f.get("stop")) {
    std::vector<const Json*> items;
    if (v->json().is_string()) {
      items.push_back(&v->json());
    } else if (v->json().is_array()) {
      if (v->json().size() > kMaxStopStrings)
        throw bad_request("stop", str_cat("'stop' takes at most ", kMaxStopStrings, " strings"));
      for (const Json& s : v->json()) items.push_back(&s);
    } else {
      v->fail(FieldProblem::kWrongType, "expected a string or an array of strings, got ",
              describe_json(v->json()));
    }
    for (const Json* s : items) {
      const std::string& text = as_param(*s, *v).string();
      if (text.empty()) throw bad_request("stop", "stop strings must not be empty");
      if (text.size() > kMaxStopBytes)
        throw bad_request("stop", str_cat("stop strings are limited to ", kMaxStopBytes, " bytes"));
      g.stop.push_back(text);
    }
  }
  if (const std::optional<JsonField> v = f.get("n"); v && v->integer(1, 128) != 1)
    throw bad_request("n", "only n = 1 is supported (one choice per request)", "unsupported_value");
  // Accepted at their neutral values only.
  for (const char* key : {"frequency_penalty", "presence_penalty"})
    if (const std::optional<JsonField> v = f.get(key); v && v->number(-2, 2) != 0.0)
      throw bad_request(key, unsupported().at(key), "unsupported_parameter");
  if (const std::optional<JsonField> v = f.get("logit_bias");
      v && !(v->json().is_object() && v->json().empty()))
    throw bad_request("logit_bias", unsupported().at("logit_bias"), "unsupported_parameter");
  if (const std::optional<JsonField> v = f.get("user")) v->string();  // metadata; nothing to do
  if (const std::optional<JsonField> v = f.get("service_tier");
      v && v->string() != "auto" && v->json() != "default")
    throw bad_request("service_tier", "only service_tier 'auto' or 'default' is supported",
                      "unsupported_value");
  check_model(f, limits);
  return g;
}

// Text of a content value: a string, or an array of {"type": "text", "text": ...} parts.
void check_content(const JsonField& content) {
  if (content.json().is_string()) return;
  if (!content.json().is_array()) {
    content.fail(FieldProblem::kWrongType, "expected a string or an array of content parts, got ",
                 describe_json(content.json()));
  }
  const size_t n = content.array_size();
  for (size_t i = 0; i < n; ++i) {
    const JsonObject part = content.element(i).object();
    const JsonField type = part.at("type");
    if (type.string() != "text")
      throw bad_request(type.path(),
                        str_cat("content parts of type '", type.string(),
                                "' are not supported: this server takes text only"),
                        "unsupported_value");
    part.string("text");
    part.finish();
  }
}

Json check_tool_calls(const JsonField& calls) {
  const size_t n = calls.array_size();
  for (size_t i = 0; i < n; ++i) {
    const JsonObject c = calls.element(i).object();
    if (const std::optional<JsonField> id = c.get("id")) id->string();
    if (const std::optional<JsonField> type = c.get("type"); type && type->string() != "function")
      throw bad_request(type->path(), "only tool calls of type 'function' are supported");
    const JsonObject f = c.object("function");
    const std::optional<JsonField> name = f.get("name");
    if (!name) throw bad_request(f.path("name"), "a tool call needs a function name");
    name->string();
    if (const std::optional<JsonField> args = f.get("arguments")) args->string();
    f.finish();
    c.finish();
  }
  return calls.json();
}

// One message, checked and copied with only the fields the renderer reads.
Json check_message(const JsonField& message) {
  const JsonObject m = message.object();
  std::string role = m.string("role");
  if (role == "developer") role = "system";  // OpenAI's newer name for the system role
  Json out = Json::object();
  out["role"] = role;
  if (const std::optional<JsonField> name = m.get("name")) out["name"] = name->string();
  if (role == "system" || role == "user" || role == "tool") {
    const JsonField content = m.at("content");
    check_content(content);
    out["content"] = content.json();
    if (role == "tool") {
      const std::optional<JsonField> id = m.get("tool_call_id");
      if (id) out["tool_call_id"] = id->string();
      if (!id && !out.contains("name"))
        throw bad_request(m.path("tool_call_id"),
                          "a tool message needs 'tool_call_id' (or the tool's 'name')");
    }
  } else if (role == "assistant") {
    const std::optional<JsonField> content = m.get("content");
    if (content) check_content(*content);
    out["content"] = content ? content->json() : Json("");
    for (const char* key : {"reasoning_content", "reasoning"})
      if (const std::optional<JsonField> r = m.get(key)) out[key] = r->string();
    if (const std::optional<JsonField> calls = m.get("tool_calls"))
      out["tool_calls"] = check_tool_calls(*calls);
    // Fields an SDK echoes back from a previous response; only their empty values are fine.
    for (const char* key : {"refusal", "audio", "function_call"})
      if (m.get(key))
        throw bad_request(m.path(key), str_cat("'", key, "' in a message is not supported"),
                          "unsupported_parameter");
    if (const std::optional<JsonField> a = m.get("annotations");
        a && !(a->json().is_array() && a->json().empty()))
      throw bad_request(a->path(), "message annotations are not supported",
                        "unsupported_parameter");
  } else {
    throw bad_request(
        m.path("role"),
        str_cat("unsupported role '", role, "'; use system, developer, user, assistant or tool"),
        "unsupported_value");
  }
  m.finish();
  return out;
}

Json check_tools(const JsonField& tools) {
  const size_t n = tools.array_size();
  for (size_t i = 0; i < n; ++i) {
    const JsonObject t = tools.element(i).object();
    const std::optional<JsonField> type = t.get("type");
    if (!type || type->string() != "function")
      throw bad_request(t.path("type"), "only tools of type 'function' are supported",
                        "unsupported_value");
    const JsonObject f = t.object("function");
    const std::optional<JsonField> name = f.get("name");
    if (!name || name->string().empty())
      throw bad_request(f.path("name"), "a tool needs a non-empty function name");
    if (const std::optional<JsonField> d = f.get("description")) d->string();
    if (const std::optional<JsonField> p = f.get("parameters"); p && !p->json().is_object())
      p->fail(FieldProblem::kWrongType, "expected a JSON Schema object, got ",
              describe_json(p->json()));
    if (const std::optional<JsonField> s = f.get("strict"); s && s->boolean())
      throw bad_request(s->path(),
                        "strict tool schemas need constrained decoding, which this server does "
                        "not do",
                        "unsupported_value");
    f.finish();
    t.finish();
  }
  return tools.json();
}

// Nesting depth of a JSON text, counted without parsing it, so that deep nesting is refused
// before anything recursive (parsing, sorting, printing) touches it.
size_t json_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Json parse_body(std::string_view body) {
  if (json_depth(body) > kMaxJsonDepth)
    throw bad_request("", str_cat("the request body nests deeper than ", kMaxJsonDepth, " levels"),
                      "invalid_json");
  return base::parse_json(body, kReadOptions);
}

ChatRequest read_chat_request(std::string_view body, const RequestLimits& limits) {
  const Json json = parse_body(body);
  const JsonObject f(JsonField(json, "", kReadOptions));
  ChatRequest r;
  r.gen = parse_generation(f, limits, limits.max_tokens_limit, 1);

  const JsonField messages = f.at("messages");
  if (!messages.json().is_array() || messages.json().empty())
    throw bad_request("messages", "'messages' must be a non-empty array");
  Json rendered_messages = Json::array();
  for (size_t i = 0; i < messages.array_size(); ++i)
    rendered_messages.push_back(check_message(messages.element(i)));
  r.render_input["messages"] = std::move(rendered_messages);

  if (const std::optional<JsonField> tools = f.get("tools");
      tools && (!tools->json().is_array() || !tools->json().empty())) {
    r.render_input["tools"] = check_tools(*tools);  // an object ({}) is refused there, named
    r.has_tools = true;
  }
  if (const std::optional<JsonField> choice = f.get("tool_choice")) {
    if (!r.has_tools)
      throw bad_request("tool_choice", "'tool_choice' is only allowed when 'tools' are given");
    if (choice->json().is_object())
      throw bad_request("tool_choice",
                        "forcing a named tool is not supported (the K3 chat format has no way to "
                        "say it); use 'auto', 'required' or 'none'",
                        "unsupported_value");
    const std::string& c = choice->string();
    if (c != "auto" && c != "required" && c != "none")
      throw bad_request("tool_choice", "'tool_choice' must be 'auto', 'required' or 'none'");
    r.render_input["tool_choice"] = c;
  }
  if (const std::optional<JsonField> p = f.get("parallel_tool_calls")) {
    r.parallel_tool_calls = p->boolean();
    if (!r.has_tools)
      throw bad_request("parallel_tool_calls",
                        "'parallel_tool_calls' is only allowed when 'tools' are given");
  }

  // Thinking: on by default; Moonshot's {"type": "enabled" | "disabled"} or a boolean.
  if (const std::optional<JsonField> t = f.get("thinking")) {
    if (t->json().is_boolean()) {
      r.thinking = t->boolean();
    } else {
      const JsonObject tf = t->object();
      const std::optional<JsonField> type = tf.get("type");
      const std::string kind = type ? type->string() : "";
      if (kind != "enabled" && kind != "disabled")
        throw bad_request("thinking.type", "'thinking.type' must be 'enabled' or 'disabled'");
      r.thinking = kind == "enabled";
      tf.finish();
    }
  }
  r.render_input["thinking"] = r.thinking;
  if (const std::optional<JsonField> e = f.get("reasoning_effort")) {
    const std::string& effort = e->string();
    if (effort != "low" && effort != "high" && effort != "max")
      throw bad_request(
          "reasoning_effort",
          str_cat("reasoning_effort '", effort, "' is not supported: K3 accepts low, high and max"),
          "unsupported_value");
    if (!r.thinking)
      throw bad_request("reasoning_effort", "'reasoning_effort' needs thinking enabled");
    r.render_input["thinking_effort"] = effort;
  }
  if (const std::optional<JsonField> rf = f.get("response_format")) {
    const JsonObject ff = rf->object();
    const std::optional<JsonField> type = ff.get("type");
    const std::string kind = type ? type->string() : "";
    if (kind == "json_schema") {
      const std::optional<JsonField> schema = ff.get("json_schema");
      if (!schema || !schema->json().is_object())
        throw bad_request("response_format.json_schema",
                          "'response_format.json_schema' must be an object");
      const JsonObject sf = schema->object();
      if (const std::optional<JsonField> n = sf.get("name")) n->string();
      if (const std::optional<JsonField> d = sf.get("description")) d->string();
      if (const std::optional<JsonField> s = sf.get("strict"); s && s->boolean())
        throw bad_request("response_format.json_schema.strict",
                          "strict schemas need constrained decoding, which this server does not do",
                          "unsupported_value");
      const std::optional<JsonField> s = sf.get("schema");
      if (!s || !s->json().is_object())
        throw bad_request("response_format.json_schema.schema",
                          "'response_format.json_schema.schema' must be a JSON Schema object");
      sf.finish();
    } else if (kind != "text" && kind != "json_object") {
      throw bad_request("response_format.type",
                        "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    }
    ff.finish();
    if (kind != "text") r.render_input["response_format"] = rf->json();
  }
  if (const std::optional<JsonField> m = f.get("modalities")) {
    if (!m->json().is_array() || m->json() != Json::array({"text"}))
      throw bad_request("modalities", "only the 'text' modality is supported", "unsupported_value");
  }
  // Accepted at their neutral values only, which SDKs send explicitly (false, 0, false).
  for (const char* key : {"logprobs", "store"})
    if (const std::optional<JsonField> v = f.get(key); v && v->boolean())
      v->fail(FieldProblem::kUnsupported, unsupported().at(key));
  if (const std::optional<JsonField> v = f.get("top_logprobs"); v && v->integer(0, 20) != 0)
    v->fail(FieldProblem::kUnsupported, unsupported().at("top_logprobs"));
  // Request metadata without effect on the output.
  if (const std::optional<JsonField> m = f.get("metadata")) m->object();
  for (const char* key : {"safety_identifier", "prompt_cache_key"})
    if (const std::optional<JsonField> v = f.get(key)) v->string();
  f.finish(unsupported());
  return r;
}

CompletionRequest read_completion_request(std::string_view body, const RequestLimits& limits) {
  const Json json = parse_body(body);
  const JsonObject f(JsonField(json, "", kReadOptions));
  CompletionRequest r;
  // max_tokens 0 is allowed here: it runs the prompt only, leaving it as reusable state.
  r.gen = parse_generation(f, limits, kCompletionDefaultMaxTokens, 0);
  const JsonField prompt = f.at("prompt");
  const Json* p = &prompt.json();
  // A batch of one is fine; more would need n > 1 choices.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    if (p->get_ref<const std::string&>().empty())
      throw bad_request("prompt", "'prompt' must not be empty");
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r.prompt_ids.reserve(p->size());
    for (const Json& id : *p)
      r.prompt_ids.push_back(
          static_cast<int32_t>(as_param(id, prompt).integer(0, limits.vocab_size - 1)));
  } else {
    throw bad_request("prompt",
                      "'prompt' must be a non-empty string or array of token ids (one prompt per "
                      "request)");
  }
  r.echo = f.boolean_or("echo", false);
  if (const std::optional<JsonField> b = f.get("best_of"); b && b->integer(1, 128) != 1)
    throw bad_request("best_of", unsupported().at("best_of"), "unsupported_value");
  if (const std::optional<JsonField> s = f.get("suffix"); s && !s->string().empty())
    throw bad_request("suffix", unsupported().at("suffix"), "unsupported_parameter");
  f.finish(unsupported());
  return r;
}

}  // namespace

nlohmann::ordered_json parse_request_body(std::string_view body) {
  try {
    return parse_body(body);
  } catch (const base::FieldError& e) {
    throw api_error(e);
  }
}

namespace detail {
void rethrow_field_error() {
  try {
    throw;
  } catch (const base::FieldError& e) {
    throw api_error(e);
  }
}
}  // namespace detail

ChatRequest parse_chat_request(std::string_view body, const RequestLimits& limits) {
  try {
    return read_chat_request(body, limits);
  } catch (const base::FieldError& e) {
    throw api_error(e);
  }
}

CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits) {
  try {
    return read_completion_request(body, limits);
  } catch (const base::FieldError& e) {
    throw api_error(e);
  }
}

}  // namespace deltafin::server
