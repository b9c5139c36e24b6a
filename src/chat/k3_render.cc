// K3 XTML rendering (see k3_render.h). The structure follows upstream's build_chat_segments step
// by step, including its surprises, because a prompt that differs from the trained format is wrong
// in ways no later check sees: docs/TOKENIZER.md lists them.
#include "chat/k3_render.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "base/error.h"
#include "chat/py_json.h"

namespace deltafin::chat {
namespace {

constexpr const char* kOpen = "<|open|>";
constexpr const char* kClose = "<|close|>";
constexpr const char* kSep = "<|sep|>";
constexpr const char* kEndOfMsg = "<|end_of_msg|>";
constexpr const char* kImagePlaceholder = "<|kimi_image_placeholder|>";

using Attrs = std::vector<std::pair<std::string, std::string>>;

// dict.get(key): the value, or null when absent (Python cannot tell those apart either).
const Json& get(const Json& object, const char* key) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// str(value) where upstream writes a value into the prompt.
std::string text_of(const Json& value, const char* what) {
  auto s = py_str(value);
  if (!s) base::fail("K3 chat: ", what, " must be a string or a number, not ", value.type_name());
  return *s;
}

std::string escape_attr(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '"') {
      out += "&quot;";
    } else {
      out += c;
    }
  }
  return out;
}

// Tool-call arguments after upstream's normalize_tool_arguments: an object to render as typed
// `argument` children, or the raw text of arguments that are not JSON, rendered in a `json` block.
struct Arguments {
  Json object = Json::object();
  std::optional<std::string> raw;
};

Arguments normalize_arguments(const Json& arguments) {
  Arguments out;
  if (arguments.is_null()) return out;
  if (arguments.is_object()) {
    out.object = arguments;
    return out;
  }
  if (!arguments.is_string()) {
    base::fail("K3 chat: tool call arguments must be an object or a JSON object string, not ",
               arguments.type_name());
  }
  const auto& text = arguments.get_ref<const std::string&>();
  if (py_is_blank(text)) return out;
  Json parsed;
  try {
    parsed = Json::parse(text);
  } catch (const Json::exception&) {  // not JSON, or a number out of double's range (1e999)
    out.raw = text;
    return out;
  }
  if (!parsed.is_object()) base::fail("K3 chat: tool call arguments must be a JSON object");
  out.object = std::move(parsed);
  return out;
}

// The "type" attribute of an argument element.
const char* xtml_type(const Json& value) {
  switch (value.type()) {
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::null:
      return "null";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::object:
      return "object";
    default:
      return "array";
  }
}

// str(call_id) for matching tool results to calls; nullopt (never matches) for containers.
std::optional<std::string> id_key(const Json& id) { return py_str(id); }

// Upstream's normalize_xtml_tool_result_messages: each run of consecutive tool messages is put in
// the order of the preceding assistant's tool_calls (matched by tool_call_id, falling back to
// id), and each matched message's `tool` (and `name`, if present) becomes the call's function
// name. A run with any unmatched message is left as it is.
Json reorder_tool_results(const Json& messages) {
  Json out = Json::array();
  std::map<std::string, std::pair<size_t, Json>> index;  // id -> (1-based position, name)
  size_t i = 0;
  while (i < messages.size()) {
    const Json& message = messages[i];
    const Json& role = get(message, "role");
    if (role == "assistant") {
      index.clear();
      const Json& calls = get(message, "tool_calls");
      if (calls.is_array()) {
        for (size_t k = 0; k < calls.size(); ++k) {
          const Json& call = calls[k];
          if (!call.is_object()) continue;
          const Json& id = get(call, "id");
          if (id.is_null()) continue;
          const auto key = id_key(id);
          if (!key || index.count(*key)) continue;
          const Json& function = get(call, "function");
          const Json& name = function.is_object() ? get(function, "name") : get(call, "name");
          index.emplace(*key, std::make_pair(k + 1, name));
        }
      }
      out.push_back(message);
      ++i;
      continue;
    }
    if (role != "tool") {
      out.push_back(message);
      ++i;
      continue;
    }
    struct Entry {
      size_t position;
      size_t offset;
      const Json* message;
      Json name;
    };
    std::vector<Entry> run;
    bool unresolved = false;
    for (; i < messages.size() && get(messages[i], "role") == "tool"; ++i) {
      const Json& tool_message = messages[i];
      const Json& call_id = tool_message.contains("tool_call_id") ? tool_message["tool_call_id"]
                                                                  : get(tool_message, "id");
      const auto key = call_id.is_null() ? std::nullopt : id_key(call_id);
      const auto match = key ? index.find(*key) : index.end();
      if (match == index.end()) {
        unresolved = true;
        run.push_back({0, run.size(), &tool_message, Json()});
      } else {
        run.push_back({match->second.first, run.size(), &tool_message, match->second.second});
      }
    }
    if (!unresolved) {
      std::stable_sort(run.begin(), run.end(),
                       [](const Entry& a, const Entry& b) { return a.position < b.position; });
    }
    for (const Entry& entry : run) {
      if (unresolved || entry.name.is_null()) {
        out.push_back(*entry.message);
        continue;
      }
      Json resolved = *entry.message;
      resolved["tool"] = entry.name;
      if (resolved.contains("name")) resolved["name"] = entry.name;
      out.push_back(std::move(resolved));
    }
  }
  return out;
}

class Renderer {
 public:
  explicit Renderer(const Json& image_prompts) : image_prompts_(image_prompts) {
    if (!image_prompts_.is_null() && !image_prompts_.is_array()) {
      base::fail("K3 chat: image_prompts must be a list of strings");
    }
  }

  std::vector<Segment> take() {
    if (!image_prompts_.is_null() && n_images_used_ != image_prompts_.size()) {
      base::fail("K3 chat: ", image_prompts_.size(), " image prompts given but ", n_images_used_,
                 " images in the conversation");
    }
    return std::move(segments_);
  }

  void markup(const std::string& text) {
    if (!text.empty()) segments_.push_back({text, true});
  }
  void text(const std::string& text) {
    if (!text.empty()) segments_.push_back({text, false});
  }

  // Caller text, with a media block spliced in at each image placeholder when images are given.
  void caller_text(const std::string& s) {
    if (s.empty()) return;
    if (image_prompts_.is_null() || s.find(kImagePlaceholder) == std::string::npos) {
      text(s);
      return;
    }
    const std::string needle = kImagePlaceholder;
    size_t start = 0;
    for (;;) {
      const size_t at = s.find(needle, start);
      text(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
      if (at == std::string::npos) break;
      markup(next_image());
      start = at + needle.size();
    }
  }

  std::string next_image() {
    if (image_prompts_.is_null()) return kImagePlaceholder;
    if (n_images_used_ >= image_prompts_.size()) {
      base::fail("K3 chat: more images than image prompts (", image_prompts_.size(), ")");
    }
    return text_of(image_prompts_[n_images_used_++], "image prompt");
  }

  void open_tag(const std::string& tag, const Attrs& attrs = {}) {
    markup(kOpen);
    text(tag);
    for (const auto& [key, value] : attrs) {
      text(" " + key);
      text("=\"");
      text(escape_attr(value));
      text("\"");
    }
    markup(kSep);
  }
  void close_tag(const std::string& tag) {
    markup(kClose);
    text(tag);
    markup(kSep);
  }
  void end_of_msg() { markup(kEndOfMsg); }

  // A message's content: a string, or a list of text / image parts.
  void content(const Json& content) {
    if (content.is_null()) return;
    if (content.is_string()) {
      caller_text(content.get_ref<const std::string&>());
      return;
    }
    if (!content.is_array()) base::fail("K3 chat: message content must be a string or a list");
    for (const Json& part : content) {
      if (!part.is_object() || !part.contains("type")) {
        base::fail("K3 chat: each content part must be an object with a 'type'");
      }
      const Json& type = part["type"];
      if (type == "image" || type == "image_url") {
        markup(next_image());
      } else {
        if (!part.contains("text"))
          base::fail("K3 chat: a content part of type ", type.dump(), " has no 'text'");
        caller_text(text_of(part["text"], "content part text"));
      }
    }
  }

  void system_note(const std::string& type, const std::string& body) {
    open_tag("message", {{"role", "system"}, {"type", type}});
    text(py_strip(body));
    close_tag("message");
    end_of_msg();
  }

  void tool_declare(const Json& tools, bool dynamic) {
    const std::string schema = py_json_dumps(tools, true);
    const std::string body =
        dynamic ? "## New Tools Available\nThe system dynamically extends the toolset via "
                  "lazy-loading.\nYou have access to all existing and extended tools.\nHere are "
                  "the specs for the extended tools.\n\n```json\n" +
                      schema + "\n```"
                : "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
                      schema + "\n```";
    open_tag("message", {{"role", "system"}, {"type", "tool-declare"}});
    text(body);
    close_tag("message");
    end_of_msg();
  }

  void assistant_body(const Json& message, bool thinking) {
    if (thinking) {
      // `reasoning_content or reasoning`: an empty reasoning_content falls through too.
      const Json& primary = get(message, "reasoning_content");
      const Json& reasoning = py_truthy(primary) ? primary : get(message, "reasoning");
      open_tag("think");
      if (!reasoning.is_null()) {
        const std::string r = text_of(reasoning, "reasoning_content");
        if (!py_is_blank(r)) caller_text(r);
      }
      close_tag("think");
    }
    open_tag("response");
    content(get(message, "content"));
    close_tag("response");

    const Json& calls = get(message, "tool_calls");
    if (!py_truthy(calls)) return;
    if (!calls.is_array()) base::fail("K3 chat: tool_calls must be a list");
    open_tag("tools");
    for (size_t k = 0; k < calls.size(); ++k) {
      const Json& call = calls[k];
      if (!call.is_object()) base::fail("K3 chat: tool calls must be objects");
      // Upstream normalizes the arguments of `function` when it is an object, else the call's own.
      const Json& function = get(call, "function");
      const Arguments args =
          normalize_arguments(get(function.is_object() ? function : call, "arguments"));
      const Json& fn = call.contains("function") ? function : call;
      const Json& name = get(fn, "name");
      if (!fn.is_object() || !name.is_string() || name.get_ref<const std::string&>().empty()) {
        base::fail("K3 chat: tool calls require a non-empty function name");
      }
      open_tag("call", {{"tool", name.get<std::string>()}, {"index", std::to_string(k + 1)}});
      if (args.raw) {
        open_tag("json", {{"type", "object"}});
        caller_text(*args.raw);
        close_tag("json");
      } else {
        for (const auto& [key, value] : args.object.items()) {
          open_tag("argument", {{"key", key}, {"type", xtml_type(value)}});
          caller_text(value.is_string() ? value.get<std::string>() : py_json_dumps(value, false));
          close_tag("argument");
        }
      }
      close_tag("call");
    }
    close_tag("tools");
  }

 private:
  const Json& image_prompts_;
  size_t n_images_used_ = 0;
  std::vector<Segment> segments_;
};

// Validates every call's arguments up front, as upstream's normalize_conversation does before
// rendering anything (so an error does not depend on where rendering stops).
void check_arguments(const Json& messages) {
  for (const Json& message : messages) {
    const Json& calls = get(message, "tool_calls");
    if (!py_truthy(calls) || !calls.is_array()) continue;
    for (const Json& call : calls) {
      if (!call.is_object()) continue;
      const Json& function = get(call, "function");
      normalize_arguments(get(function.is_object() ? function : call, "arguments"));
    }
  }
}

// response_format's schema: json_schema.schema, else json_schema.json_schema, else json_schema.
Json response_schema(const Json& input) {
  if (input.contains("response_schema")) return input["response_schema"];
  const Json& json_schema = get(get(input, "response_format"), "json_schema");
  if (json_schema.is_object()) {
    if (json_schema.contains("schema")) return json_schema["schema"];
    if (json_schema.contains("json_schema")) return json_schema["json_schema"];
  }
  return json_schema;
}

std::vector<Segment> render(const Json& input) {
  if (!input.is_object()) base::fail("K3 chat: the input must be a JSON object");
  if (!input.contains("messages") || !input["messages"].is_array()) {
    base::fail("K3 chat: 'messages' must be a list");
  }
  const bool thinking = !input.contains("thinking") || py_truthy(input["thinking"]);
  const bool add_generation_prompt =
      !input.contains("add_generation_prompt") || py_truthy(input["add_generation_prompt"]);
  const Json messages = reorder_tool_results(input["messages"]);
  check_arguments(messages);
  const Json tools = deep_sort(get(input, "tools"));

  Renderer r(get(input, "image_prompts"));
  if (py_truthy(tools)) r.tool_declare(tools, /*dynamic=*/false);

  const Json& effort = get(input, "thinking_effort");
  if (thinking && !effort.is_null()) {
    if (!(effort == "low" || effort == "high" || effort == "max")) {
      base::fail("K3 chat: unsupported thinking_effort ", effort.dump(),
                 "; supported values are low, high and max");
    }
    r.system_note("thinking-effort",
                  "`thinking_effort` guides on how much to think in your thinking channel (not "
                  "including the response channel), supported values include `low`, `medium`, "
                  "`high`, and `max`.\nNow the system is invoked with `thinking_effort=" +
                      effort.get<std::string>() + "`.");
  }

  const Json* tool_calls = nullptr;  // of the latest assistant message, for unnamed tool results
  size_t tool_index = 0;
  for (const Json& message : messages) {
    if (!message.is_object()) continue;  // upstream skips these
    if (!message.contains("role")) base::fail("K3 chat: a message has no 'role'");
    const Json& role = message["role"];
    const Json& name = get(message, "name");
    if (role == "user" || (role == "system" && !py_truthy(get(message, "tools")))) {
      Attrs attrs = {{"role", role.get<std::string>()}};
      if (py_truthy(name)) attrs.emplace_back("name", text_of(name, "message name"));
      r.open_tag("message", attrs);
      r.content(get(message, "content"));
      r.close_tag("message");
      r.end_of_msg();
    } else if (role == "system") {
      r.tool_declare(deep_sort(message["tools"]), /*dynamic=*/true);
    } else if (role == "tool") {
      ++tool_index;
      Json tool_name = message.contains("tool") ? message["tool"] : name;
      if (tool_name.is_null() && tool_calls && !tool_calls->is_null() &&
          tool_index <= tool_calls->size()) {
        const Json& call = (*tool_calls)[tool_index - 1];
        const Json& fn = call.contains("function") ? call["function"] : call;
        if (!fn.is_object() || !fn.contains("name")) {
          base::fail("K3 chat: tool call ", tool_index, " has no function name");
        }
        tool_name = fn["name"];
      }
      if (tool_name.is_null()) {
        base::fail("K3 chat: tool message ", tool_index, " needs a tool name: give `tool` or ",
                   "`name`, or answer a preceding assistant tool call");
      }
      r.open_tag("message", {{"role", "tool"},
                             {"tool", text_of(tool_name, "tool name")},
                             {"index", std::to_string(tool_index)}});
      r.content(get(message, "content"));
      r.close_tag("message");
      r.end_of_msg();
    } else if (role == "assistant") {
      tool_calls = &get(message, "tool_calls");
      tool_index = 0;
      Attrs attrs = {{"role", "assistant"}};
      if (py_truthy(name)) attrs.emplace_back("name", text_of(name, "message name"));
      r.open_tag("message", attrs);
      r.assistant_body(message, thinking);
      r.close_tag("message");
      r.end_of_msg();
    }
    // Any other role is dropped, as upstream does.
  }

  const Json& tool_choice = get(input, "tool_choice");
  if (tool_choice == "required") {
    r.system_note("tool-choice",
                  "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the "
                  "next message.");
  } else if (tool_choice == "none") {
    r.system_note("tool-choice",
                  "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in "
                  "the next message.");
  }

  const Json& format = get(input, "response_format");
  const Json& format_type = format.is_object() && format.contains("type") ? format["type"] : format;
  const std::string json_note =
      "Your response must be raw JSON data without markdown code blocks (```json) or any "
      "additional formatting.";
  if (format_type == "json_object") {
    r.system_note("response-format",
                  "The system is invoked with `response_format=json_object`.\n" + json_note);
  } else if (format_type == "json_schema") {
    const Json schema = deep_sort(response_schema(input));
    r.system_note("response-format",
                  "The system is invoked with `response_format=json_schema`.\n" + json_note +
                      "\nThe JSON data must match the following schema:\n```json\n" +
                      py_json_dumps(schema, true) + "\n```");
  }

  if (add_generation_prompt) {
    r.open_tag("message", {{"role", "assistant"}});
    r.open_tag(thinking ? "think" : "response");
  }
  return r.take();
}

}  // namespace

std::vector<Segment> render_k3(const nlohmann::ordered_json& input) {
  try {
    return render(input);
  } catch (const nlohmann::json::exception& e) {
    base::fail("K3 chat: malformed input: ", e.what());
  }
}

std::vector<Segment> render_k3(const nlohmann::json& input) {
  return render_k3(nlohmann::ordered_json(input));
}

std::vector<int32_t> tokenize_segments(const tokenizer::Tokenizer& tokenizer,
                                       const std::vector<Segment>& segments) {
  std::vector<int32_t> ids;
  for (const Segment& s : segments) {
    if (s.is_markup) {
      tokenizer.encode_markup_into(s.text, ids);
    } else {
      tokenizer.encode_ordinary_into(s.text, ids);
    }
  }
  return ids;
}

}  // namespace deltafin::chat
