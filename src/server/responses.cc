// Translation of Responses bodies into chat bodies (validated with Responses' field names first,
// then by the chat parser), and the Response object and stream events, after the OpenAI API
// reference and the openai SDK's types (ResponseStreamEvent).
#include "server/responses.h"

#include <ctime>
#include <limits>
#include <map>

#include "base/error.h"
#include "base/json_fields.h"
#include "server/api_error.h"

namespace deltafin::server {
namespace {

using base::describe_json;
using base::FieldProblem;
using base::JsonField;
using base::JsonObject;
using base::str_cat;
using Json = nlohmann::ordered_json;

const base::JsonReadOptions kReadOptions{"", true};

// Fields of the Responses API this server knows but cannot honour.
const std::map<std::string, std::string>& unsupported() {
  static const std::map<std::string, std::string> m = {
      {"previous_response_id",
       "stored responses are not supported: send the conversation in 'input' (state reuse makes "
       "resending it cheap)"},
      {"conversation", "stored conversations are not supported: send the conversation in 'input'"},
      {"prompt", "stored prompt templates are not supported"},
      {"context_management", "context management is not supported"},
      {"prompt_cache_options", "prompt cache options are not supported (reuse is automatic)"},
      {"prompt_cache_retention", "prompt cache retention is not supported (reuse is automatic)"},
      {"moderation", "moderation is not supported"},
      {"max_tool_calls", "max_tool_calls is not supported; use parallel_tool_calls: false"},
      {"top_k", "top_k is not a Responses API parameter; use /v1/chat/completions"},
  };
  return m;
}

// Text of a content value: a string, or parts of the given text types.
std::string content_text(const JsonField& content, std::initializer_list<const char*> types) {
  if (content.json().is_string()) return content.string();
  if (!content.json().is_array())
    content.fail(FieldProblem::kWrongType, "expected a string or an array of content parts, got ",
                 describe_json(content.json()));
  std::string text;
  for (size_t i = 0; i < content.array_size(); ++i) {
    const JsonObject part = content.element(i).object();
    const JsonField type = part.at("type");
    bool ok = false;
    for (const char* t : types) ok = ok || type.string() == t;
    if (!ok) {
      std::string allowed;
      for (const char* t : types) allowed += (allowed.empty() ? "'" : ", '") + std::string(t) + "'";
      throw bad_request(type.path(),
                        str_cat("content parts of type '", type.string(),
                                "' are not supported here: this server takes text (", allowed, ")"),
                        "unsupported_value");
    }
    text += part.string("text");
    if (const std::optional<JsonField> a = part.get("annotations");
        a && !(a->json().is_array() && a->json().empty()))
      throw bad_request(a->path(), "annotations are not supported", "unsupported_parameter");
    if (const std::optional<JsonField> l = part.get("logprobs")) l->array_size();
    part.finish();
  }
  return text;
}

// Fields an echoed output item carries that say nothing about the conversation.
void read_item_metadata(const JsonObject& item) {
  if (const std::optional<JsonField> id = item.get("id")) id->string();
  if (const std::optional<JsonField> status = item.get("status")) status->string();
}

// Builds the chat messages from the input items. Consecutive assistant-side items (reasoning, an
// assistant message, function calls) make one assistant message, as the chat endpoint returned
// them, so that sending a response back renders the ids the model produced.
class MessageBuilder {
 public:
  void add(Json message) {
    messages_.push_back(std::move(message));
    assistant_open_ = false;
  }
  Json& assistant(int stage) {  // stage: 0 reasoning, 1 content, 2 tool calls
    if (!assistant_open_ || stage < stage_ || (stage == stage_ && stage < 2)) {
      messages_.push_back(Json{{"role", "assistant"}});
      assistant_open_ = true;
    }
    stage_ = stage;
    return messages_.back();
  }
  Json take() { return std::move(messages_); }

 private:
  Json messages_ = Json::array();
  bool assistant_open_ = false;
  int stage_ = 0;
};

void read_message_item(const JsonObject& item, MessageBuilder& out) {
  const JsonField role_field = item.at("role");
  const std::string& role = role_field.string();
  const JsonField content = item.at("content");
  read_item_metadata(item);
  if (role == "assistant") {
    out.assistant(1)["content"] = content_text(content, {"output_text", "input_text"});
  } else if (role == "user" || role == "system" || role == "developer") {
    // Parts stay parts, as in the equivalent chat request.
    Json chat_content;
    if (content.json().is_string()) {
      chat_content = content.string();
    } else {
      content_text(content, {"input_text"});  // validates
      chat_content = Json::array();
      for (const Json& part : content.json())
        chat_content.push_back(Json{{"type", "text"}, {"text", part["text"]}});
    }
    out.add(Json{{"role", role}, {"content", std::move(chat_content)}});
  } else {
    throw bad_request(role_field.path(),
                      str_cat("unsupported role '", role,
                              "'; input messages take user, system, developer or assistant "
                              "(tool results are function_call_output items)"),
                      "unsupported_value");
  }
}

void read_input_item(const JsonField& field, MessageBuilder& out) {
  const JsonObject item = field.object();
  const std::optional<JsonField> type_field = item.get("type");
  const std::string type = type_field ? type_field->string() : "message";
  if (type == "message") {
    read_message_item(item, out);
  } else if (type == "reasoning") {
    read_item_metadata(item);
    std::string text;
    if (const std::optional<JsonField> c = item.get("content"))
      text = content_text(*c, {"reasoning_text"});
    if (const std::optional<JsonField> s = item.get("summary")) {
      const std::string summary = content_text(*s, {"summary_text"});
      if (text.empty()) text = summary;
    }
    if (const std::optional<JsonField> e = item.get("encrypted_content"))
      throw bad_request(e->path(), "encrypted reasoning is not supported: send it as 'content'",
                        "unsupported_parameter");
    out.assistant(0)["reasoning_content"] = text;
  } else if (type == "function_call") {
    read_item_metadata(item);
    Json call = {
        {"id", item.string("call_id")},
        {"type", "function"},
        {"function", {{"name", item.string("name")}, {"arguments", item.string("arguments")}}}};
    Json& message = out.assistant(2);
    if (!message.contains("tool_calls")) message["tool_calls"] = Json::array();
    message["tool_calls"].push_back(std::move(call));
  } else if (type == "function_call_output") {
    read_item_metadata(item);
    const std::string call_id = item.string("call_id");
    const std::string output = content_text(item.at("output"), {"input_text", "output_text"});
    out.add(Json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", output}});
  } else if (type == "item_reference") {
    throw bad_request(type_field->path(),
                      "item references need stored responses, which this server does not keep; "
                      "send the item itself",
                      "unsupported_value");
  } else {
    throw bad_request(type_field->path(),
                      str_cat("input items of type '", type,
                              "' are not supported; use message, reasoning, function_call or "
                              "function_call_output"),
                      "unsupported_value");
  }
  item.finish();
}

Json read_tools(const JsonField& tools) {
  Json out = Json::array();
  for (size_t i = 0; i < tools.array_size(); ++i) {
    const JsonObject t = tools.element(i).object();
    const JsonField type = t.at("type");
    if (type.string() != "function")
      throw bad_request(type.path(),
                        str_cat("tools of type '", type.string(),
                                "' are not supported: this server runs function tools only"),
                        "unsupported_value");
    Json function = {{"name", t.string("name")}};
    if (function["name"].get_ref<const std::string&>().empty())
      throw bad_request(t.path("name"), "a tool needs a non-empty name");
    if (const std::optional<JsonField> d = t.get("description"))
      function["description"] = d->string();
    if (const std::optional<JsonField> p = t.get("parameters")) {
      if (!p->json().is_object())
        p->fail(FieldProblem::kWrongType, "expected a JSON Schema object, got ",
                describe_json(p->json()));
      function["parameters"] = p->json();
    }
    if (const std::optional<JsonField> s = t.get("strict"); s && s->boolean())
      throw bad_request(s->path(),
                        "strict tool schemas need constrained decoding, which this server does "
                        "not do; set strict: false",
                        "unsupported_value");
    t.finish();
    out.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
  }
  return out;
}

// text.format -> the chat response_format.
Json read_text_format(const JsonObject& text) {
  const std::optional<JsonField> format = text.get("format");
  if (!format) return Json(nullptr);
  const JsonObject f = format->object();
  const JsonField type = f.at("type");
  Json out;
  if (type.string() == "text" || type.string() == "json_object") {
    out = Json{{"type", type.string()}};
  } else if (type.string() == "json_schema") {
    Json schema = {{"name", f.string("name")}};
    if (const std::optional<JsonField> d = f.get("description"))
      schema["description"] = d->string();
    const JsonField s = f.at("schema");
    if (!s.json().is_object())
      s.fail(FieldProblem::kWrongType, "expected a JSON Schema object, got ",
             describe_json(s.json()));
    schema["schema"] = s.json();
    if (const std::optional<JsonField> st = f.get("strict"); st && st->boolean())
      throw bad_request(st->path(),
                        "strict schemas need constrained decoding, which this server does not do; "
                        "set strict: false",
                        "unsupported_value");
    out = Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    throw bad_request(type.path(),
                      "'text.format.type' must be 'text', 'json_object' or 'json_schema'");
  }
  f.finish();
  return out;
}

ResponsesRequest read_request(std::string_view body, const RequestLimits& limits) {
  const Json json = parse_request_body(body);
  const JsonObject f(JsonField(json, "", kReadOptions));
  Json chat = Json::object();
  ResponsesRequest r;
  Json& echo = r.echo;
  if (const std::optional<JsonField> m = f.get("model")) chat["model"] = m->string();

  MessageBuilder messages;
  echo["instructions"] = nullptr;
  if (const std::optional<JsonField> i = f.get("instructions")) {
    messages.add(Json{{"role", "system"}, {"content", i->string()}});
    echo["instructions"] = i->string();
  }
  const JsonField input = f.at("input");
  if (input.json().is_string()) {
    messages.add(Json{{"role", "user"}, {"content", input.string()}});
  } else if (input.json().is_array()) {
    for (size_t i = 0; i < input.array_size(); ++i) read_input_item(input.element(i), messages);
  } else {
    input.fail(FieldProblem::kWrongType, "expected a string or an array of input items, got ",
               describe_json(input.json()));
  }
  chat["messages"] = messages.take();
  if (chat["messages"].empty()) throw bad_request("input", "'input' must not be empty");

  echo["max_output_tokens"] = nullptr;
  if (const std::optional<JsonField> m = f.get("max_output_tokens")) {
    const int64_t n = m->integer(1, std::numeric_limits<int32_t>::max());
    if (n > limits.max_tokens_limit)
      throw bad_request("max_output_tokens",
                        str_cat("'max_output_tokens' is ", n, " but this server generates at most ",
                                limits.max_tokens_limit,
                                " tokens per request (deltafin serve --max-tokens-limit)"));
    chat["max_tokens"] = n;
    echo["max_output_tokens"] = n;
  }
  echo["temperature"] = 0.0;  // the server's default is greedy
  if (const std::optional<JsonField> t = f.get("temperature"))
    echo["temperature"] = chat["temperature"] = t->number(0, 2);
  echo["top_p"] = 1.0;
  if (const std::optional<JsonField> t = f.get("top_p"))
    echo["top_p"] = chat["top_p"] = t->number(0, 1);
  if (const std::optional<JsonField> s = f.get("seed")) chat["seed"] = s->json();
  if (f.boolean_or("stream", false)) chat["stream"] = true;
  if (const std::optional<JsonField> o = f.get("stream_options")) {
    if (!chat.contains("stream"))
      throw bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    const JsonObject so = o->object();
    if (so.boolean_or("include_obfuscation", false))
      throw bad_request("stream_options.include_obfuscation",
                        "stream obfuscation is not supported; set it to false or leave it out",
                        "unsupported_parameter");
    so.finish();
  }

  echo["tools"] = Json::array();
  if (const std::optional<JsonField> t = f.get("tools");
      t && !(t->json().is_array() && t->json().empty())) {
    chat["tools"] = read_tools(*t);
    echo["tools"] = t->json();
  }
  echo["tool_choice"] = "auto";
  if (const std::optional<JsonField> c = f.get("tool_choice")) {
    if (c->json().is_object())
      throw bad_request("tool_choice",
                        "forcing a named tool is not supported (the K3 chat format has no way to "
                        "say it); use 'auto', 'required' or 'none'",
                        "unsupported_value");
    chat["tool_choice"] = echo["tool_choice"] = c->string();
  }
  echo["parallel_tool_calls"] = true;
  if (const std::optional<JsonField> p = f.get("parallel_tool_calls"))
    chat["parallel_tool_calls"] = echo["parallel_tool_calls"] = p->boolean();

  echo["reasoning"] = Json{{"effort", nullptr}, {"summary", nullptr}};
  if (const std::optional<JsonField> rf = f.get("reasoning")) {
    const JsonObject ro = rf->object();
    if (const std::optional<JsonField> e = ro.get("effort")) {
      const std::string& effort = e->string();
      if (effort == "none") {
        chat["thinking"] = false;
      } else if (effort == "low" || effort == "high" || effort == "max") {
        chat["reasoning_effort"] = effort;
      } else {
        throw bad_request(e->path(),
                          str_cat("reasoning effort '", effort,
                                  "' is not supported: K3 accepts low, high and max, or none "
                                  "for no reasoning"),
                          "unsupported_value");
      }
      echo["reasoning"]["effort"] = effort;
    }
    if (const std::optional<JsonField> s = ro.get("summary"))
      throw bad_request(s->path(),
                        "reasoning summaries are not supported: the reasoning comes whole, as "
                        "the reasoning item's reasoning_text content",
                        "unsupported_parameter");
    ro.finish();
  }
  echo["text"] = Json{{"format", {{"type", "text"}}}};
  if (const std::optional<JsonField> t = f.get("text")) {
    const JsonObject to = t->object();
    if (Json format = read_text_format(to); !format.is_null()) {
      if (format["type"] != "text") chat["response_format"] = format;
      echo["text"]["format"] = to.at("format").json();
    }
    if (const std::optional<JsonField> v = to.get("verbosity"))
      throw bad_request(v->path(), "verbosity is not supported", "unsupported_parameter");
    to.finish();
  }
  if (const std::optional<JsonField> s = f.get("store"); s && s->boolean())
    throw bad_request("store", "stored responses are not supported; leave 'store' out or false",
                      "unsupported_parameter");
  if (const std::optional<JsonField> b = f.get("background"); b && b->boolean())
    throw bad_request("background", "background responses are not supported",
                      "unsupported_parameter");
  if (const std::optional<JsonField> i = f.get("include"); i && i->array_size() > 0)
    throw bad_request(
        "include[0]",
        str_cat("'include' values are not supported (got ", describe_json(i->json()[0]), ")"),
        "unsupported_parameter");
  if (const std::optional<JsonField> t = f.get("truncation"); t && t->string() != "disabled")
    throw bad_request("truncation", "only truncation 'disabled' is supported", "unsupported_value");
  if (const std::optional<JsonField> t = f.get("top_logprobs"); t && t->integer(0, 20) != 0)
    throw bad_request("top_logprobs", "logprobs are not supported", "unsupported_parameter");
  echo["metadata"] = Json::object();
  if (const std::optional<JsonField> m = f.get("metadata")) {
    m->object();
    echo["metadata"] = chat["metadata"] = m->json();
  }
  echo["user"] = nullptr;
  if (const std::optional<JsonField> u = f.get("user")) echo["user"] = chat["user"] = u->string();
  for (const char* key : {"safety_identifier", "prompt_cache_key", "service_tier"})
    if (const std::optional<JsonField> v = f.get(key)) chat[key] = v->string();
  f.finish(unsupported());

  r.chat = parse_chat_request(chat.dump(), limits);
  return r;
}

Json usage_object(const Usage& u) {
  return Json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view body, const RequestLimits& limits) {
  return with_field_errors([&] { return read_request(body, limits); });
}

std::string ResponsesWriter::event(Json body) {
  body["sequence_number"] = sequence_++;
  const std::string type = body["type"].get<std::string>();
  return "event: " + type + "\n" + sse_event(body);
}

std::string ResponsesWriter::begin(const ResponseMeta& meta) {
  const Json r = response(meta, nullptr);
  std::string out = event(Json{{"type", "response.created"}, {"response", r}});
  return out + event(Json{{"type", "response.in_progress"}, {"response", r}});
}

std::string ResponsesWriter::close_item(const char* status) {
  if (open_ == Open::kNone) return "";
  const int64_t index = static_cast<int64_t>(output_.size()) - 1;
  Json& item = output_.back();
  const std::string id = item["id"];
  const bool text = open_ == Open::kText;
  Json part = text ? Json{{"type", "output_text"},
                          {"annotations", Json::array()},
                          {"logprobs", Json::array()},
                          {"text", open_text_}}
                   : Json{{"type", "reasoning_text"}, {"text", open_text_}};
  Json done = {{"type", text ? "response.output_text.done" : "response.reasoning_text.done"},
               {"item_id", id},
               {"output_index", index},
               {"content_index", 0},
               {"text", open_text_}};
  if (text) done["logprobs"] = Json::array();
  std::string out = event(std::move(done));
  out += event(Json{{"type", "response.content_part.done"},
                    {"item_id", id},
                    {"output_index", index},
                    {"content_index", 0},
                    {"part", part}});
  item["status"] = status;
  item["content"] = Json::array({std::move(part)});
  out +=
      event(Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  open_ = Open::kNone;
  open_text_.clear();
  return out;
}

std::string ResponsesWriter::delta(const Delta& d) {
  std::string out;
  if (d.kind == Delta::Kind::kToolCall) {
    out += close_item("completed");
    const int64_t index = static_cast<int64_t>(output_.size());
    Json item = {{"id", new_id_("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
                 {"arguments", ""},      {"call_id", d.call.id},    {"name", d.call.name}};
    const std::string id = item["id"];
    out += event(
        Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
    out += event(Json{{"type", "response.function_call_arguments.delta"},
                      {"item_id", id},
                      {"output_index", index},
                      {"delta", d.call.arguments}});
    out += event(Json{{"type", "response.function_call_arguments.done"},
                      {"item_id", id},
                      {"output_index", index},
                      {"name", d.call.name},
                      {"arguments", d.call.arguments}});
    item["status"] = "completed";
    item["arguments"] = d.call.arguments;
    out +=
        event(Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
    return out;
  }
  if (d.text.empty()) return out;
  const Open kind = d.kind == Delta::Kind::kReasoning ? Open::kReasoning : Open::kText;
  const bool text = kind == Open::kText;
  if (open_ != kind) {
    out += close_item("completed");
    Json item = text ? Json{{"id", new_id_("msg_")},
                            {"type", "message"},
                            {"status", "in_progress"},
                            {"role", "assistant"},
                            {"content", Json::array()}}
                     : Json{{"id", new_id_("rs_")},
                            {"type", "reasoning"},
                            {"status", "in_progress"},
                            {"summary", Json::array()},
                            {"content", Json::array()}};
    const int64_t index = static_cast<int64_t>(output_.size());
    const std::string id = item["id"];
    out += event(
        Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
    Json part = text ? Json{{"type", "output_text"},
                            {"annotations", Json::array()},
                            {"logprobs", Json::array()},
                            {"text", ""}}
                     : Json{{"type", "reasoning_text"}, {"text", ""}};
    out += event(Json{{"type", "response.content_part.added"},
                      {"item_id", id},
                      {"output_index", index},
                      {"content_index", 0},
                      {"part", std::move(part)}});
    open_ = kind;
  }
  open_text_ += d.text;
  Json e = {{"type", text ? "response.output_text.delta" : "response.reasoning_text.delta"},
            {"item_id", output_.back()["id"]},
            {"output_index", static_cast<int64_t>(output_.size()) - 1},
            {"content_index", 0},
            {"delta", d.text}};
  if (text) e["logprobs"] = Json::array();
  return out + event(std::move(e));
}

std::string ResponsesWriter::end(const ResponseMeta& meta, const Outcome& outcome) {
  const bool incomplete = outcome.finish_reason == "length";
  std::string out = close_item(incomplete ? "incomplete" : "completed");
  return out + event(Json{{"type", incomplete ? "response.incomplete" : "response.completed"},
                          {"response", response(meta, &outcome)}});
}

std::string ResponsesWriter::fail(const ResponseMeta& meta, const std::string& code,
                                  const std::string& message) {
  std::string out = close_item("incomplete");
  failed_ = true;
  Json r = response(meta, nullptr);
  r["error"] = Json{{"code", code}, {"message", message}};
  return out + event(Json{{"type", "response.failed"}, {"response", r}});
}

Json ResponsesWriter::whole(const ResponseMeta& meta, const Outcome& outcome) {
  for (const Delta& d : outcome.deltas) delta(d);
  close_item(outcome.finish_reason == "length" ? "incomplete" : "completed");
  return response(meta, &outcome);
}

Json ResponsesWriter::response(const ResponseMeta& meta, const Outcome* outcome) const {
  const bool incomplete = outcome && outcome->finish_reason == "length";
  Json r = {
      {"id", meta.id},
      {"object", "response"},
      {"created_at", meta.created},
      {"status", failed_      ? "failed"
                 : !outcome   ? "in_progress"
                 : incomplete ? "incomplete"
                              : "completed"},
      {"background", false},
      {"error", nullptr},
      {"incomplete_details", incomplete ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)}};
  const auto echoed = [this](const char* key) {
    return echo_.contains(key) ? echo_.at(key) : Json(nullptr);
  };
  r["instructions"] = echoed("instructions");
  r["max_output_tokens"] = echoed("max_output_tokens");
  r["model"] = meta.model;
  r["output"] = outcome ? output_ : Json::array();
  for (const char* key : {"parallel_tool_calls", "reasoning", "temperature", "text", "tool_choice",
                          "tools", "top_p", "metadata", "user"})
    r[key] = echoed(key);
  r["previous_response_id"] = nullptr;
  r["store"] = false;
  r["truncation"] = "disabled";
  r["usage"] = outcome ? usage_object(outcome->usage) : Json(nullptr);
  if (outcome) r["completed_at"] = static_cast<int64_t>(std::time(nullptr));
  return r;
}

}  // namespace deltafin::server
