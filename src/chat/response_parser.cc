// The K3 response parser (see response_parser.h). It works on ids, not text: the XTML brackets
// are special tokens the model emits as such, while user-visible text can never contain them, so
// structure is unambiguous without looking at decoded strings.
#include "chat/response_parser.h"

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace deltafin::chat {
namespace {

int32_t required_special(const tokenizer::Tokenizer& tok, const char* name) {
  const auto id = tok.special_id(name);
  if (!id) base::fail("K3 response parser: the tokenizer has no special token ", name);
  return *id;
}

std::string lossy(const std::string& bytes) {
  std::string out;
  tokenizer::utf8::decode_replace(bytes, out, /*final=*/true);
  return out;
}

// `tag key="value" ...` -> tag and attributes (values unescaped: &quot; and &amp;).
std::string parse_header(const std::string& header,
                         std::vector<std::pair<std::string, std::string>>& attrs) {
  size_t i = header.find(' ');
  const std::string tag = header.substr(0, i);
  while (i != std::string::npos && i < header.size()) {
    while (i < header.size() && header[i] == ' ') ++i;
    const size_t eq = header.find("=\"", i);
    if (eq == std::string::npos) break;
    const size_t end = header.find('"', eq + 2);
    if (end == std::string::npos) break;
    std::string value;
    for (size_t k = eq + 2; k < end; ++k) {
      if (header.compare(k, 6, "&quot;") == 0) {
        value += '"';
        k += 5;
      } else if (header.compare(k, 5, "&amp;") == 0) {
        value += '&';
        k += 4;
      } else {
        value += header[k];
      }
    }
    attrs.emplace_back(header.substr(i, eq - i), std::move(value));
    i = end + 1;
  }
  return tag;
}

std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// An argument's value as JSON text: strings quoted; other declared types as written when that is
// valid JSON, else quoted so that the result stays parseable.
std::string argument_json(const std::string& type, const std::string& value) {
  if (type != "string" && nlohmann::json::accept(value)) {
    const size_t first = value.find_first_not_of(" \t\r\n");
    const size_t last = value.find_last_not_of(" \t\r\n");
    return value.substr(first, last - first + 1);
  }
  return json_string(value);
}

}  // namespace

ResponseParser::ResponseParser(const tokenizer::Tokenizer& tokenizer, bool thinking)
    : tokenizer_(&tokenizer),
      open_id_(required_special(tokenizer, "<|open|>")),
      close_id_(required_special(tokenizer, "<|close|>")),
      sep_id_(required_special(tokenizer, "<|sep|>")),
      end_id_(required_special(tokenizer, "<|end_of_msg|>")),
      eos_id_(tokenizer.special_id("[EOS]").value_or(-1)),
      stack_{"message", thinking ? "think" : "response"},
      decoder_(tokenizer) {}

std::string ResponseParser::text_channel() const {
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    if (*it == "think" || *it == "response" || *it == "argument" || *it == "json" ||
        *it == "tools" || *it == "call") {
      return *it;
    }
  }
  return "response";  // text outside any channel is still the answer, never dropped
}

void ResponseParser::flush_text(std::vector<ParseEvent>& events) {
  std::string text = decoder_.flush();
  if (text.empty()) return;
  const std::string channel = text_channel();
  events.push_back(
      {channel == "think" ? ParseEvent::kReasoning : ParseEvent::kContent, std::move(text), {}});
}

void ResponseParser::on_open(const std::string& header) {
  std::vector<std::pair<std::string, std::string>> attrs;
  const std::string tag = parse_header(header, attrs);
  const auto attr = [&](const char* key) {
    for (const auto& [k, v] : attrs) {
      if (k == key) return v;
    }
    return std::string();
  };
  if (tag == "call") {
    in_call_ = true;
    call_has_raw_ = false;
    arguments_.clear();
    ++n_calls_;
    const std::string index = attr("index");
    call_ =
        ToolCall{attr("tool"), "", "call_" + (index.empty() ? std::to_string(n_calls_) : index)};
  } else if (tag == "argument") {
    arguments_.push_back({attr("key"), attr("type"), ""});
    raw_bytes_.clear();
  } else if (tag == "json") {
    raw_bytes_.clear();
  }
  stack_.push_back(tag);
}

void ResponseParser::on_close(const std::string& tag, std::vector<ParseEvent>& events) {
  // Pop up to the matching element; a close without one is ignored.
  size_t depth = stack_.size();
  while (depth > 0 && stack_[depth - 1] != tag) --depth;
  if (depth == 0) return;
  stack_.resize(depth - 1);
  if (tag == "argument" && in_call_ && !arguments_.empty()) {
    arguments_.back().value_bytes = raw_bytes_;
  } else if (tag == "json" && in_call_) {
    call_has_raw_ = true;
    call_.arguments_json = lossy(raw_bytes_);
  } else if (tag == "call" && in_call_) {
    if (!call_has_raw_) {
      std::string json = "{";
      for (size_t i = 0; i < arguments_.size(); ++i) {
        if (i) json += ", ";
        json += json_string(lossy(arguments_[i].key)) + ": " +
                argument_json(arguments_[i].type, lossy(arguments_[i].value_bytes));
      }
      call_.arguments_json = json + "}";
    }
    events.push_back({ParseEvent::kToolCall, "", call_});
    in_call_ = false;
  }
}

std::vector<ParseEvent> ResponseParser::push(int32_t id) {
  std::vector<ParseEvent> events;
  if (done_) return events;
  if (id == end_id_ || id == eos_id_) {
    flush_text(events);
    events.push_back({ParseEvent::kEnd, "", {}});
    done_ = true;
    return events;
  }
  if (mode_ != Mode::kBody) {
    if (id == sep_id_) {
      const std::string header = lossy(header_bytes_);
      if (mode_ == Mode::kOpenHeader) {
        on_open(header);
      } else {
        on_close(header, events);
      }
      header_bytes_.clear();
      mode_ = Mode::kBody;
    } else {
      header_bytes_ += tokenizer_->token_bytes(id);
    }
    return events;
  }
  if (id == open_id_ || id == close_id_) {
    flush_text(events);
    mode_ = id == open_id_ ? Mode::kOpenHeader : Mode::kCloseHeader;
    return events;
  }
  const std::string channel = text_channel();
  if (channel == "argument" || channel == "json") {
    raw_bytes_ += tokenizer_->token_bytes(id);
  } else if (channel == "think" || channel == "response") {
    std::string text = decoder_.push(id);
    if (!text.empty()) {
      events.push_back({channel == "think" ? ParseEvent::kReasoning : ParseEvent::kContent,
                        std::move(text),
                        {}});
    }
  }
  // Text between elements of `tools` / `call` carries nothing.
  return events;
}

std::vector<ParseEvent> ResponseParser::finish() {
  std::vector<ParseEvent> events;
  if (done_) return events;
  flush_text(events);
  done_ = true;
  return events;
}

}  // namespace deltafin::chat
