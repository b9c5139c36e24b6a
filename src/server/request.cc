// Validation of /v1/chat/completions and /v1/completions bodies, field by field.
#include "server/request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "base/error.h"
#include "server/api_error.h"

namespace deltafin::server {
namespace {

using Json = nlohmann::ordered_json;
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

// An object's keys, each to be taken once; leftovers are unknown fields.
class Fields {
 public:
  Fields(const Json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object.is_object())
      throw bad_request(where_, str_cat(name(""), " must be a JSON object"), "invalid_type");
  }
  // The value, or nullptr when absent or null.
  const Json* take(const std::string& key) {
    taken_.insert(key);
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const std::string& key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  std::string name(const std::string& key) const {
    if (key.empty()) return where_.empty() ? "the body" : where_;
    return where_.empty() ? key : where_ + "." + key;
  }
  void finish() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (taken_.count(it.key()) || it->is_null()) continue;  // null: the default, honoured
      const auto u = unsupported().find(it.key());
      if (u != unsupported().end())
        throw bad_request(name(it.key()), u->second, "unsupported_parameter");
      throw bad_request(name(it.key()), str_cat("unknown parameter '", name(it.key()), "'"),
                        "unknown_parameter");
    }
  }

 private:
  const Json& object_;
  std::string where_;
  std::set<std::string> taken_;
};

[[noreturn]] void wrong_type(const std::string& param, const char* want) {
  throw bad_request(param, str_cat("'", param, "' must be ", want), "invalid_type");
}

bool get_bool(const Json& v, const std::string& param) {
  if (!v.is_boolean()) wrong_type(param, "a boolean");
  return v.get<bool>();
}

const std::string& get_string(const Json& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string");
  return v.get_ref<const std::string&>();
}

int64_t get_int(const Json& v, const std::string& param, int64_t lo, int64_t hi) {
  const auto out_of_range = [&] {
    return bad_request(
        param, str_cat("'", param, "' must be between ", lo, " and ", hi, "; got ", v.dump()));
  };
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) throw out_of_range();
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
             v.get<double>() == std::floor(v.get<double>()) && std::fabs(v.get<double>()) < 1e15) {
    x = static_cast<int64_t>(v.get<double>());  // 16.0 is an integer in JSON's number model
  } else {
    wrong_type(param, "an integer");
  }
  if (x < lo || x > hi) throw out_of_range();
  return x;
}

double get_number(const Json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) wrong_type(param, "a number");
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    throw bad_request(
        param, str_cat("'", param, "' must be between ", lo, " and ", hi, "; got ", v.dump()));
  return x;
}

void check_model(Fields& f, const RequestLimits& limits) {
  const Json* model = f.take("model");
  if (!model) return;
  const std::string& name = get_string(*model, "model");
  for (const std::string& ok : limits.model_names)
    if (name == ok) return;
  std::string served;
  for (const std::string& ok : limits.model_names)
    served += (served.empty() ? "'" : ", '") + ok + "'";
  throw ApiError{404, str_cat("The model '", name, "' does not exist; this server serves ", served),
                 "invalid_request_error", "model", "model_not_found"};
}

// Fields both endpoints share. `default_max` applies when no max is given.
GenerationParams parse_generation(Fields& f, const RequestLimits& limits, int default_max,
                                  int min_max_tokens) {
  GenerationParams g;
  if (const Json* v = f.take("stream")) g.stream = get_bool(*v, "stream");
  if (const Json* v = f.take("stream_options")) {
    if (!g.stream)
      throw bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    Fields o(*v, "stream_options");
    if (const Json* u = o.take("include_usage"))
      g.include_usage = get_bool(*u, "stream_options.include_usage");
    if (const Json* u = o.take("include_obfuscation");
        u && get_bool(*u, "stream_options.include_obfuscation"))
      throw bad_request("stream_options.include_obfuscation",
                        "stream obfuscation is not supported; set it to false or leave it out",
                        "unsupported_parameter");
    o.finish();
  }
  std::optional<int64_t> max_tokens;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const Json* v = f.take(key);
    if (!v) continue;
    const int64_t n = get_int(*v, key, min_max_tokens, std::numeric_limits<int32_t>::max());
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
  if (const Json* v = f.take("temperature")) g.temperature = get_number(*v, "temperature", 0, 2);
  if (const Json* v = f.take("top_p")) g.top_p = get_number(*v, "top_p", 0, 1);
  if (const Json* v = f.take("top_k")) {
    const int64_t k = get_int(*v, "top_k", -1, std::numeric_limits<int32_t>::max());
    g.top_k = k < 0 ? 0 : static_cast<int>(k);  // -1 means "no cut", as in vLLM
  }
  if (const Json* v = f.take("seed")) {
    if (v->is_number_unsigned())
      g.seed = v->get<uint64_t>();
    else
      g.seed = static_cast<uint64_t>(get_int(*v, "seed", std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max()));
  }
  if (const Json* v = f.take("stop")) {
    std::vector<const Json*> items;
    if (v->is_string()) {
      items.push_back(v);
    } else if (v->is_array()) {
      if (v->size() > kMaxStopStrings)
        throw bad_request("stop", str_cat("'stop' takes at most ", kMaxStopStrings, " strings"));
      for (const Json& s : *v) items.push_back(&s);
    } else {
      wrong_type("stop", "a string or an array of strings");
    }
    for (const Json* s : items) {
      const std::string& text = get_string(*s, "stop");
      if (text.empty()) throw bad_request("stop", "stop strings must not be empty");
      if (text.size() > kMaxStopBytes)
        throw bad_request("stop", str_cat("stop strings are limited to ", kMaxStopBytes, " bytes"));
      g.stop.push_back(text);
    }
  }
  if (const Json* v = f.take("n"); v && get_int(*v, "n", 1, 128) != 1)
    throw bad_request("n", "only n = 1 is supported (one choice per request)", "unsupported_value");
  // Accepted at their neutral values only.
  for (const char* key : {"frequency_penalty", "presence_penalty"})
    if (const Json* v = f.take(key); v && get_number(*v, key, -2, 2) != 0.0)
      throw bad_request(key, unsupported().at(key), "unsupported_parameter");
  if (const Json* v = f.take("logit_bias"); v && !(v->is_object() && v->empty()))
    throw bad_request("logit_bias", unsupported().at("logit_bias"), "unsupported_parameter");
  if (const Json* v = f.take("user")) get_string(*v, "user");  // metadata; nothing to do
  if (const Json* v = f.take("service_tier");
      v && get_string(*v, "service_tier") != "auto" && *v != "default")
    throw bad_request("service_tier", "only service_tier 'auto' or 'default' is supported",
                      "unsupported_value");
  check_model(f, limits);
  return g;
}

// Text of a content value: a string, or an array of {"type": "text", "text": ...} parts.
void check_content(const Json& content, const std::string& param, bool allow_null) {
  if (content.is_null()) {
    if (!allow_null) throw bad_request(param, str_cat("'", param, "' is required"));
    return;
  }
  if (content.is_string()) return;
  if (!content.is_array()) wrong_type(param, "a string or an array of content parts");
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string where = str_cat(param, "[", i, "]");
    Fields part(content[i], where);
    const Json* type = part.take("type");
    if (!type) throw bad_request(where + ".type", str_cat("'", where, ".type' is required"));
    if (get_string(*type, where + ".type") != "text")
      throw bad_request(where + ".type",
                        str_cat("content parts of type '", type->get<std::string>(),
                                "' are not supported: this server takes text only"),
                        "unsupported_value");
    const Json* text = part.take("text");
    if (!text) throw bad_request(where + ".text", str_cat("'", where, ".text' is required"));
    get_string(*text, where + ".text");
    part.finish();
  }
}

Json check_tool_calls(const Json& calls, const std::string& param) {
  if (!calls.is_array()) wrong_type(param, "an array");
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string where = str_cat(param, "[", i, "]");
    Fields c(calls[i], where);
    if (const Json* id = c.take("id")) get_string(*id, where + ".id");
    if (const Json* type = c.take("type"); type && get_string(*type, where + ".type") != "function")
      throw bad_request(where + ".type", "only tool calls of type 'function' are supported");
    const Json* fn = c.take("function");
    if (!fn) throw bad_request(where + ".function", str_cat("'", where, ".function' is required"));
    Fields f(*fn, where + ".function");
    const Json* name = f.take("name");
    if (!name) throw bad_request(where + ".function.name", "a tool call needs a function name");
    get_string(*name, where + ".function.name");
    if (const Json* args = f.take("arguments")) get_string(*args, where + ".function.arguments");
    f.finish();
    c.finish();
  }
  return calls;
}

// One message, checked and copied with only the fields the renderer reads.
Json check_message(const Json& message, size_t index) {
  const std::string where = str_cat("messages[", index, "]");
  Fields m(message, where);
  const Json* role_value = m.take("role");
  if (!role_value) throw bad_request(where + ".role", str_cat("'", where, ".role' is required"));
  std::string role = get_string(*role_value, where + ".role");
  if (role == "developer") role = "system";  // OpenAI's newer name for the system role
  Json out = Json::object();
  out["role"] = role;
  if (const Json* name = m.take("name")) out["name"] = get_string(*name, where + ".name");
  const Json* content = m.take("content");
  if (role == "system" || role == "user" || role == "tool") {
    check_content(content ? *content : Json(), where + ".content", false);
    out["content"] = *content;
    if (role == "tool") {
      const Json* id = m.take("tool_call_id");
      if (id) out["tool_call_id"] = get_string(*id, where + ".tool_call_id");
      if (!id && !out.contains("name"))
        throw bad_request(where + ".tool_call_id",
                          "a tool message needs 'tool_call_id' (or the tool's 'name')");
    }
  } else if (role == "assistant") {
    check_content(content ? *content : Json(), where + ".content", true);
    out["content"] = content ? *content : Json("");
    for (const char* key : {"reasoning_content", "reasoning"})
      if (const Json* r = m.take(key)) out[key] = get_string(*r, where + "." + key);
    if (const Json* calls = m.take("tool_calls"))
      out["tool_calls"] = check_tool_calls(*calls, where + ".tool_calls");
    // Fields an SDK echoes back from a previous response; only their empty values are fine.
    for (const char* key : {"refusal", "audio", "function_call"})
      if (m.take(key))
        throw bad_request(where + "." + key, str_cat("'", key, "' in a message is not supported"),
                          "unsupported_parameter");
    if (const Json* a = m.take("annotations"); a && !(a->is_array() && a->empty()))
      throw bad_request(where + ".annotations", "message annotations are not supported",
                        "unsupported_parameter");
  } else {
    throw bad_request(
        where + ".role",
        str_cat("unsupported role '", role, "'; use system, developer, user, assistant or tool"),
        "unsupported_value");
  }
  m.finish();
  return out;
}

Json check_tools(const Json& tools) {
  if (!tools.is_array()) wrong_type("tools", "an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = str_cat("tools[", i, "]");
    Fields t(tools[i], where);
    const Json* type = t.take("type");
    if (!type || get_string(*type, where + ".type") != "function")
      throw bad_request(where + ".type", "only tools of type 'function' are supported",
                        "unsupported_value");
    const Json* fn = t.take("function");
    if (!fn) throw bad_request(where + ".function", str_cat("'", where, ".function' is required"));
    Fields f(*fn, where + ".function");
    const Json* name = f.take("name");
    if (!name || get_string(*name, where + ".function.name").empty())
      throw bad_request(where + ".function.name", "a tool needs a non-empty function name");
    if (const Json* d = f.take("description")) get_string(*d, where + ".function.description");
    if (const Json* p = f.take("parameters"); p && !p->is_object())
      wrong_type(where + ".function.parameters", "a JSON Schema object");
    if (const Json* s = f.take("strict"); s && get_bool(*s, where + ".function.strict"))
      throw bad_request(where + ".function.strict",
                        "strict tool schemas need constrained decoding, which this server does "
                        "not do",
                        "unsupported_value");
    f.finish();
    t.finish();
  }
  return tools;
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
  try {
    return Json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw bad_request("", str_cat("the request body is not valid JSON: ", e.what()),
                      "invalid_json");
  }
}

}  // namespace

ChatRequest parse_chat_request(std::string_view body, const RequestLimits& limits) {
  const Json json = parse_body(body);
  Fields f(json, "");
  ChatRequest r;
  r.gen = parse_generation(f, limits, limits.max_tokens_limit, 1);

  const Json* messages = f.take("messages");
  if (!messages) throw bad_request("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty())
    throw bad_request("messages", "'messages' must be a non-empty array");
  Json rendered_messages = Json::array();
  for (size_t i = 0; i < messages->size(); ++i)
    rendered_messages.push_back(check_message((*messages)[i], i));
  r.render_input["messages"] = std::move(rendered_messages);

  if (const Json* tools = f.take("tools"); tools && !tools->empty()) {
    r.render_input["tools"] = check_tools(*tools);
    r.has_tools = true;
  }
  if (const Json* choice = f.take("tool_choice")) {
    if (!r.has_tools)
      throw bad_request("tool_choice", "'tool_choice' is only allowed when 'tools' are given");
    if (choice->is_object())
      throw bad_request("tool_choice",
                        "forcing a named tool is not supported (the K3 chat format has no way to "
                        "say it); use 'auto', 'required' or 'none'",
                        "unsupported_value");
    const std::string& c = get_string(*choice, "tool_choice");
    if (c != "auto" && c != "required" && c != "none")
      throw bad_request("tool_choice", "'tool_choice' must be 'auto', 'required' or 'none'");
    r.render_input["tool_choice"] = c;
  }
  if (const Json* p = f.take("parallel_tool_calls")) {
    r.parallel_tool_calls = get_bool(*p, "parallel_tool_calls");
    if (!r.has_tools)
      throw bad_request("parallel_tool_calls",
                        "'parallel_tool_calls' is only allowed when 'tools' are given");
  }

  // Thinking: on by default; Moonshot's {"type": "enabled" | "disabled"} or a boolean.
  if (const Json* t = f.take("thinking")) {
    if (t->is_boolean()) {
      r.thinking = t->get<bool>();
    } else {
      Fields tf(*t, "thinking");
      const Json* type = tf.take("type");
      const std::string kind = type ? get_string(*type, "thinking.type") : "";
      if (kind != "enabled" && kind != "disabled")
        throw bad_request("thinking.type", "'thinking.type' must be 'enabled' or 'disabled'");
      r.thinking = kind == "enabled";
      tf.finish();
    }
  }
  r.render_input["thinking"] = r.thinking;
  if (const Json* e = f.take("reasoning_effort")) {
    const std::string& effort = get_string(*e, "reasoning_effort");
    if (effort != "low" && effort != "high" && effort != "max")
      throw bad_request(
          "reasoning_effort",
          str_cat("reasoning_effort '", effort, "' is not supported: K3 accepts low, high and max"),
          "unsupported_value");
    if (!r.thinking)
      throw bad_request("reasoning_effort", "'reasoning_effort' needs thinking enabled");
    r.render_input["thinking_effort"] = effort;
  }
  if (const Json* rf = f.take("response_format")) {
    Fields ff(*rf, "response_format");
    const Json* type = ff.take("type");
    const std::string kind = type ? get_string(*type, "response_format.type") : "";
    if (kind == "json_schema") {
      const Json* schema = ff.take("json_schema");
      if (!schema || !schema->is_object())
        throw bad_request("response_format.json_schema",
                          "'response_format.json_schema' must be an object");
      Fields sf(*schema, "response_format.json_schema");
      if (const Json* n = sf.take("name")) get_string(*n, "response_format.json_schema.name");
      if (const Json* d = sf.take("description"))
        get_string(*d, "response_format.json_schema.description");
      if (const Json* s = sf.take("strict");
          s && get_bool(*s, "response_format.json_schema.strict"))
        throw bad_request("response_format.json_schema.strict",
                          "strict schemas need constrained decoding, which this server does not do",
                          "unsupported_value");
      const Json* s = sf.take("schema");
      if (!s || !s->is_object())
        throw bad_request("response_format.json_schema.schema",
                          "'response_format.json_schema.schema' must be a JSON Schema object");
      sf.finish();
    } else if (kind != "text" && kind != "json_object") {
      throw bad_request("response_format.type",
                        "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
    }
    ff.finish();
    if (kind != "text") r.render_input["response_format"] = *rf;
  }
  if (const Json* m = f.take("modalities")) {
    if (!m->is_array() || *m != Json::array({"text"}))
      throw bad_request("modalities", "only the 'text' modality is supported", "unsupported_value");
  }
  // Request metadata without effect on the output.
  if (const Json* m = f.take("metadata"); m && !m->is_object()) wrong_type("metadata", "an object");
  for (const char* key : {"safety_identifier", "prompt_cache_key"})
    if (const Json* v = f.take(key)) get_string(*v, key);
  f.finish();
  return r;
}

CompletionRequest parse_completion_request(std::string_view body, const RequestLimits& limits) {
  const Json json = parse_body(body);
  Fields f(json, "");
  CompletionRequest r;
  // max_tokens 0 is allowed here: it runs the prompt only, leaving it as reusable state.
  r.gen = parse_generation(f, limits, kCompletionDefaultMaxTokens, 0);
  const Json* prompt = f.take("prompt");
  if (!prompt) throw bad_request("prompt", "'prompt' is required");
  const Json* p = prompt;
  // A batch of one is fine; more would need n > 1 choices.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    if (p->get_ref<const std::string&>().empty())
      throw bad_request("prompt", "'prompt' must not be empty");
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r.prompt_ids.reserve(p->size());
    for (const Json& id : *p)
      r.prompt_ids.push_back(static_cast<int32_t>(get_int(id, "prompt", 0, limits.vocab_size - 1)));
  } else {
    throw bad_request("prompt",
                      "'prompt' must be a non-empty string or array of token ids (one prompt per "
                      "request)");
  }
  if (const Json* e = f.take("echo")) r.echo = get_bool(*e, "echo");
  if (const Json* b = f.take("best_of"); b && get_int(*b, "best_of", 1, 128) != 1)
    throw bad_request("best_of", unsupported().at("best_of"), "unsupported_value");
  if (const Json* s = f.take("suffix"); s && !get_string(*s, "suffix").empty())
    throw bad_request("suffix", unsupported().at("suffix"), "unsupported_parameter");
  f.finish();
  return r;
}

}  // namespace deltafin::server
