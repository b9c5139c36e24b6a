// /v1/responses: the translation into chat requests (the same render input as the equivalent
// chat body), its strictness, the typed stream events, and the endpoint end to end on the
// k3-tiny-a fixture, where its text must equal the chat completion's.
#include "server/responses.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "server/api_error.h"
#include "server/service.h"
#include "server/test_socket.h"
#include "testing/text_model.h"

namespace deltafin::server {
namespace {

using Json = nlohmann::ordered_json;

RequestLimits limits() {
  RequestLimits l;
  l.max_tokens_limit = 4096;
  l.vocab_size = 512;
  l.model_names = {"tiny"};
  return l;
}

ApiError refusal(const Json& body) {
  try {
    parse_responses_request(body.dump(), limits());
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return {};
}

// The Responses body and its chat equivalent give the same chat request.
void expect_same_as_chat(const Json& responses, const Json& chat) {
  const ResponsesRequest r = parse_responses_request(responses.dump(), limits());
  const ChatRequest c = parse_chat_request(chat.dump(), limits());
  EXPECT_EQ(r.chat.render_input.dump(), c.render_input.dump());
  EXPECT_EQ(r.chat.gen.max_tokens, c.gen.max_tokens);
  EXPECT_EQ(r.chat.gen.max_tokens_given, c.gen.max_tokens_given);
  EXPECT_EQ(r.chat.gen.temperature, c.gen.temperature);
  EXPECT_EQ(r.chat.gen.top_p, c.gen.top_p);
  EXPECT_EQ(r.chat.gen.seed, c.gen.seed);
  EXPECT_EQ(r.chat.gen.stream, c.gen.stream);
  EXPECT_EQ(r.chat.thinking, c.thinking);
  EXPECT_EQ(r.chat.has_tools, c.has_tools);
  EXPECT_EQ(r.chat.parallel_tool_calls, c.parallel_tool_calls);
}

TEST(ResponsesRequest, TextInputAndInstructionsAreTheChatMessages) {
  expect_same_as_chat(
      {{"model", "tiny"},
       {"input", "Hi"},
       {"instructions", "Be brief."},
       {"max_output_tokens", 20},
       {"temperature", 0.5},
       {"top_p", 0.9},
       {"seed", 7},
       {"stream", true}},
      {{"model", "tiny"},
       {"messages",
        {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
       {"max_tokens", 20},
       {"temperature", 0.5},
       {"top_p", 0.9},
       {"seed", 7},
       {"stream", true}});
}

TEST(ResponsesRequest, MessageItemsAndPartsAreTheChatMessages) {
  expect_same_as_chat(
      {{"input",
        {{{"role", "developer"}, {"content", "Rules."}},
         {{"type", "message"},
          {"role", "user"},
          {"content",
           {{{"type", "input_text"}, {"text", "a"}}, {{"type", "input_text"}, {"text", "b"}}}}},
         {{"role", "assistant"},
          {"content", {{{"type", "output_text"}, {"text", "c"}, {"annotations", Json::array()}}}}},
         {{"role", "user"}, {"content", "d"}}}},
       {"reasoning", {{"effort", "none"}}}},
      {{"messages",
        {{{"role", "developer"}, {"content", "Rules."}},
         {{"role", "user"},
          {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
         {{"role", "assistant"}, {"content", "c"}},
         {{"role", "user"}, {"content", "d"}}}},
       {"thinking", false}});
}

// A response's output items sent back (reasoning, text, calls, then the results) render as the
// one assistant message the chat endpoint returned, which is what keeps state reuse exact.
TEST(ResponsesRequest, OutputItemsSentBackAreOneAssistantMessage) {
  const Json params = {{"type", "object"}, {"properties", Json::object()}};
  expect_same_as_chat(
      {{"input",
        {{{"role", "user"}, {"content", "weather?"}},
         {{"type", "reasoning"},
          {"id", "rs_1"},
          {"summary", Json::array()},
          {"content", {{{"type", "reasoning_text"}, {"text", "think"}}}}},
         {{"type", "message"},
          {"id", "msg_1"},
          {"status", "completed"},
          {"role", "assistant"},
          {"content",
           {{{"type", "output_text"}, {"text", "Let me see."}, {"annotations", Json::array()}}}}},
         {{"type", "function_call"},
          {"id", "fc_1"},
          {"call_id", "call_a"},
          {"name", "get"},
          {"arguments", "{}"}},
         {{"type", "function_call"},
          {"call_id", "call_b"},
          {"name", "get"},
          {"arguments", "{\"x\":1}"}},
         {{"type", "function_call_output"}, {"call_id", "call_a"}, {"output", "sunny"}},
         {{"type", "function_call_output"}, {"call_id", "call_b"}, {"output", "rain"}}}},
       {"tools",
        {{{"type", "function"},
          {"name", "get"},
          {"description", "d"},
          {"parameters", params},
          {"strict", false}}}},
       {"tool_choice", "auto"},
       {"parallel_tool_calls", false},
       {"reasoning", {{"effort", "high"}}}},
      {{"messages",
        {{{"role", "user"}, {"content", "weather?"}},
         {{"role", "assistant"},
          {"reasoning_content", "think"},
          {"content", "Let me see."},
          {"tool_calls",
           {{{"id", "call_a"},
             {"type", "function"},
             {"function", {{"name", "get"}, {"arguments", "{}"}}}},
            {{"id", "call_b"},
             {"type", "function"},
             {"function", {{"name", "get"}, {"arguments", "{\"x\":1}"}}}}}}},
         {{"role", "tool"}, {"tool_call_id", "call_a"}, {"content", "sunny"}},
         {{"role", "tool"}, {"tool_call_id", "call_b"}, {"content", "rain"}}}},
       {"tools",
        {{{"type", "function"},
          {"function", {{"name", "get"}, {"description", "d"}, {"parameters", params}}}}}},
       {"tool_choice", "auto"},
       {"parallel_tool_calls", false},
       {"reasoning_effort", "high"}});
  // Two assistant texts in a row stay two messages.
  const ResponsesRequest r = parse_responses_request(
      Json{{"input",
            {{{"role", "assistant"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}}}}}
          .dump(),
      limits());
  EXPECT_EQ(r.chat.render_input["messages"].size(), 2u);
}

TEST(ResponsesRequest, NeutralValuesAndNullsAreAccepted) {
  const Json body = {{"input", "x"},
                     {"store", false},
                     {"include", Json::array()},
                     {"truncation", "disabled"},
                     {"top_logprobs", 0},
                     {"background", false},
                     {"previous_response_id", nullptr},
                     {"instructions", nullptr},
                     {"metadata", {{"k", "v"}}},
                     {"user", "u"},
                     {"service_tier", "auto"},
                     {"text", {{"format", {{"type", "text"}}}}},
                     {"tools", Json::array()}};
  const ResponsesRequest r = parse_responses_request(body.dump(), limits());
  EXPECT_EQ(r.echo["metadata"]["k"], "v");
  EXPECT_TRUE(r.echo["instructions"].is_null());
  EXPECT_FALSE(r.chat.render_input.contains("response_format"));
}

TEST(ResponsesRequest, RefusesWhatItCannotHonourNamingTheField) {
  struct Case {
    Json body;
    std::string param, code;
  };
  const std::vector<Case> cases = {
      {{{"input", "x"}, {"frobnicate", 1}}, "frobnicate", "unknown_parameter"},
      {{{"input", {{{"role", "user"}, {"content", "x"}, {"extra", 1}}}}},
       "input[0].extra",
       "unknown_parameter"},
      {{{"input", "x"}, {"previous_response_id", "resp_1"}},
       "previous_response_id",
       "unsupported_parameter"},
      {{{"input", "x"}, {"store", true}}, "store", "unsupported_parameter"},
      {{{"input", "x"}, {"include", {"reasoning.encrypted_content"}}},
       "include[0]",
       "unsupported_parameter"},
      {{{"input", "x"}, {"tools", {{{"type", "web_search"}}}}},
       "tools[0].type",
       "unsupported_value"},
      {{{"input", "x"}, {"tools", {{{"type", "function"}, {"name", "f"}, {"strict", true}}}}},
       "tools[0].strict",
       "unsupported_value"},
      {{{"input", "x"},
        {"tools", {{{"type", "function"}, {"name", "f"}}}},
        {"tool_choice", {{"type", "function"}, {"name", "f"}}}},
       "tool_choice",
       "unsupported_value"},
      {{{"input", "x"}, {"reasoning", {{"effort", "medium"}}}},
       "reasoning.effort",
       "unsupported_value"},
      {{{"input", "x"}, {"reasoning", {{"summary", "auto"}}}},
       "reasoning.summary",
       "unsupported_parameter"},
      {{{"input", {{{"role", "tool"}, {"content", "x"}}}}}, "input[0].role", "unsupported_value"},
      {{{"input",
         {{{"role", "user"}, {"content", {{{"type", "input_image"}, {"image_url", "u"}}}}}}}},
       "input[0].content[0].type",
       "unsupported_value"},
      {{{"input", {{{"type", "item_reference"}, {"id", "msg_1"}}}}},
       "input[0].type",
       "unsupported_value"},
      {{{"input", 3}}, "input", "invalid_type"},
      {{{"input", Json::array()}}, "input", "invalid_value"},
      {{{"model", "tiny"}}, "input", "invalid_value"},
      {{{"input", "x"}, {"max_output_tokens", 5000}}, "max_output_tokens", "invalid_value"},
      {{{"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens", "invalid_value"},
      {{{"input", "x"}, {"temperature", 3}}, "temperature", "invalid_value"},
      {{{"input", "x"},
        {"text",
         {{"format",
           {{"type", "json_schema"},
            {"name", "n"},
            {"schema", Json::object()},
            {"strict", true}}}}}},
       "text.format.strict",
       "unsupported_value"},
      {{{"input", "x"}, {"text", {{"verbosity", "low"}}}},
       "text.verbosity",
       "unsupported_parameter"},
      {{{"input", "x"}, {"stream_options", {{"include_obfuscation", false}}}},
       "stream_options",
       "invalid_value"},
  };
  for (const Case& c : cases) {
    const ApiError e = refusal(c.body);
    EXPECT_EQ(e.status, 400) << c.body.dump();
    EXPECT_EQ(e.param, c.param) << c.body.dump() << ": " << e.message;
    EXPECT_EQ(e.code, c.code) << c.body.dump() << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
  }
  EXPECT_EQ(refusal({{"input", "x"}, {"model", "other"}}).status, 404);
  EXPECT_EQ(refusal({{"input", "x"}, {"model", "other"}}).code, "model_not_found");
  EXPECT_EQ(refusal(Json::array()).status, 400);
}

TEST(ResponsesRequest, JsonSchemaFormatIsTheChatResponseFormat) {
  const Json schema = {{"type", "object"}};
  expect_same_as_chat(
      {{"input", "x"},
       {"text",
        {{"format",
          {{"type", "json_schema"}, {"name", "n"}, {"schema", schema}, {"strict", false}}}}}},
      {{"messages", {{{"role", "user"}, {"content", "x"}}}},
       {"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}}});
}

std::vector<Json> parse_events(const std::string& sse) {
  std::vector<Json> out;
  size_t pos = 0;
  while ((pos = sse.find("event: ", pos)) != std::string::npos) {
    const size_t eol = sse.find('\n', pos);
    const std::string type = sse.substr(pos + 7, eol - pos - 7);
    const size_t end = sse.find("\n\n", eol);
    EXPECT_EQ(sse.compare(eol + 1, 6, "data: "), 0);
    out.push_back(Json::parse(sse.substr(eol + 7, end - eol - 7)));
    EXPECT_EQ(out.back()["type"], type);
    pos = end;
  }
  return out;
}

Delta text_delta(Delta::Kind kind, std::string text) {
  Delta d;
  d.kind = kind;
  d.text = std::move(text);
  return d;
}

Outcome sample_outcome(const std::string& finish) {
  Outcome o;
  o.deltas.push_back(text_delta(Delta::Kind::kReasoning, "hm"));
  o.deltas.push_back(text_delta(Delta::Kind::kReasoning, "m"));
  o.deltas.push_back(text_delta(Delta::Kind::kContent, "Hel"));
  o.deltas.push_back(text_delta(Delta::Kind::kContent, "lo"));
  Delta call;
  call.kind = Delta::Kind::kToolCall;
  call.call.id = "call_x";
  call.call.name = "get";
  call.call.arguments = "{\"a\":1}";
  o.deltas.push_back(call);
  o.finish_reason = finish;
  o.usage = Usage{10, 7, 4, 3};
  return o;
}

ResponsesWriter writer() {
  int n = 0;
  return ResponsesWriter(Json{{"instructions", "i"}, {"tools", Json::array()}},
                         [n](const char* prefix) mutable { return prefix + std::to_string(n++); });
}

TEST(ResponsesWriter, StreamsTypedEventsInOrder) {
  const ResponseMeta meta{"resp_1", 100, "tiny"};
  const Outcome o = sample_outcome("tool_calls");
  ResponsesWriter w = writer();
  std::string sse = w.begin(meta);
  for (const Delta& d : o.deltas) sse += w.delta(d);
  sse += w.end(meta, o);
  const std::vector<Json> events = parse_events(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    types.push_back(events[i]["type"]);
    EXPECT_EQ(events[i]["sequence_number"], i);
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  EXPECT_TRUE(events[0]["response"]["usage"].is_null());
  EXPECT_EQ(events[4]["item_id"], "rs_0");
  EXPECT_EQ(events[6]["text"], "hmm");
  EXPECT_EQ(events[11]["output_index"], 1);
  EXPECT_EQ(events[13]["text"], "Hello");
  EXPECT_EQ(events[16]["item"]["call_id"], "call_x");
  EXPECT_EQ(events[18]["arguments"], "{\"a\":1}");
  EXPECT_EQ(events[18]["name"], "get");
  const Json& done = events.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["instructions"], "i");
  EXPECT_EQ(done["usage"]["input_tokens"], 10);
  EXPECT_EQ(done["usage"]["output_tokens"], 7);
  EXPECT_EQ(done["usage"]["total_tokens"], 17);
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(done["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
  // The streamed response's output is what a whole request gets (but for the clock reading).
  ResponsesWriter w2 = writer();
  Json whole = w2.whole(meta, o);
  Json streamed = done;
  whole.erase("completed_at");
  streamed.erase("completed_at");
  EXPECT_EQ(whole.dump(), streamed.dump());
}

TEST(ResponsesWriter, WholeResponseItemsAndLengthIsIncomplete) {
  const ResponseMeta meta{"resp_1", 100, "tiny"};
  ResponsesWriter w = writer();
  const Json r = w.whole(meta, sample_outcome("length"));
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "incomplete");
  EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(r["output"].size(), 3u);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "hmm");
  EXPECT_EQ(r["output"][1]["type"], "message");
  EXPECT_EQ(r["output"][1]["content"][0]["type"], "output_text");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hello");
  EXPECT_EQ(r["output"][2]["type"], "function_call");
  EXPECT_EQ(r["output"][2]["arguments"], "{\"a\":1}");
  ResponsesWriter w2 = writer();
  const std::string tail = w2.end(meta, sample_outcome("length"));
  EXPECT_NE(tail.find("event: response.incomplete\n"), std::string::npos);
}

TEST(ResponsesWriter, AFailureMidStreamEndsWithResponseFailed) {
  const ResponseMeta meta{"resp_1", 100, "tiny"};
  const Outcome o = sample_outcome("stop");
  ResponsesWriter w = writer();
  std::string sse = w.begin(meta);
  sse += w.delta(o.deltas.front());  // an item is open when the generation fails
  sse += w.fail(meta, "server_error", "generation failed: disk gone");
  const std::vector<Json> events = parse_events(sse);
  ASSERT_GE(events.size(), 4u);
  const Json& last = events.back();
  EXPECT_EQ(last["type"], "response.failed");
  EXPECT_EQ(last["sequence_number"], events.size() - 1);
  EXPECT_EQ(last["response"]["status"], "failed");
  EXPECT_EQ(last["response"]["error"]["code"], "server_error");
  EXPECT_EQ(last["response"]["error"]["message"], "generation failed: disk gone");
  // The open item was closed before the failure, marked incomplete.
  EXPECT_EQ(events[events.size() - 2]["type"], "response.output_item.done");
  EXPECT_EQ(events[events.size() - 2]["item"]["status"], "incomplete");
  EXPECT_EQ(sse.find("[DONE]"), std::string::npos);  // the Responses API sends none
}

// The endpoint on the fixture: the text is the chat completion's for the same conversation.
const std::string& model_dir() {
  static const std::string dir = deltafin::testing::make_text_model(
      DELTAFIN_SOURCE_DIR, "k3-tiny-a", ::testing::TempDir() + "responses-text-model");
  return dir;
}

// The status, then the body; `head` gets the response head.
std::string post(int port, const std::string& path, const Json& body, std::string* head = nullptr) {
  const int fd = connect_to(port);
  const std::string text = body.dump();
  // The headers a non-browser client sends (the server refuses other Hosts and content types).
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                          "Content-Type: application/json\r\n" +
                          "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
  EXPECT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string wire;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) wire.append(buf, n);
  ::close(fd);
  const size_t head_end = wire.find("\r\n\r\n");
  EXPECT_NE(head_end, std::string::npos);
  if (head) *head = wire.substr(0, head_end);
  std::string out = wire.substr(head_end + 4);
  if (wire.substr(0, head_end).find("chunked") != std::string::npos) {
    std::string body_text;
    ChunkedDecoder d(1 << 30);
    d.feed(out, body_text);
    out = body_text;
  }
  return wire.substr(9, 3) + out;  // the status, then the body
}

TEST(ResponsesEndpoint, TextEqualsTheChatCompletionWholeAndStreamed) {
  std::unique_ptr<Engine> engine = Engine::load({model_dir(), 64});
  ServiceOptions o;
  o.model_id = "tiny";
  o.memo = false;
  Service service(*engine, o);
  HttpServer http({}, [&](const HttpRequest& r, HttpConnection& c) { service.handle(r, c); });
  http.bind("127.0.0.1", 0);
  std::thread loop([&] { http.run(); });

  const std::string chat =
      post(http.port(), "/v1/chat/completions",
           {{"messages",
             {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "Hi"}}}},
            {"max_tokens", 12}});
  ASSERT_EQ(chat.substr(0, 3), "200") << chat;
  const Json c = Json::parse(chat.substr(3));
  const Json& message = c["choices"][0]["message"];
  const Json body = {{"input", "Hi"}, {"instructions", "S"}, {"max_output_tokens", 12}};
  const std::string whole = post(http.port(), "/v1/responses", body);
  ASSERT_EQ(whole.substr(0, 3), "200") << whole;
  const Json r = Json::parse(whole.substr(3));
  EXPECT_TRUE(r["id"].get<std::string>().starts_with("resp_"));
  std::string text, reasoning;
  for (const Json& item : r["output"]) {
    if (item["type"] == "message") text += item["content"][0]["text"].get<std::string>();
    if (item["type"] == "reasoning") reasoning += item["content"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, message["content"].is_null() ? "" : message["content"].get<std::string>());
  EXPECT_EQ(reasoning, message["reasoning_content"]);
  EXPECT_FALSE(reasoning.empty() && text.empty());  // something was compared
  EXPECT_EQ(r["usage"]["input_tokens"], c["usage"]["prompt_tokens"]);
  EXPECT_EQ(r["usage"]["output_tokens"], c["usage"]["completion_tokens"]);
  EXPECT_EQ(r["status"], c["choices"][0]["finish_reason"] == "length" ? "incomplete" : "completed");

  Json streamed_body = body;
  streamed_body["stream"] = true;
  const std::string streamed = post(http.port(), "/v1/responses", streamed_body);
  ASSERT_EQ(streamed.substr(0, 3), "200") << streamed;
  EXPECT_EQ(streamed.find("[DONE]"), std::string::npos);
  const std::vector<Json> events = parse_events(streamed.substr(3));
  ASSERT_GE(events.size(), 3u);
  std::string streamed_text, streamed_reasoning;
  for (const Json& e : events) {
    if (e["type"] == "response.output_text.delta") streamed_text += e["delta"].get<std::string>();
    if (e["type"] == "response.reasoning_text.delta")
      streamed_reasoning += e["delta"].get<std::string>();
  }
  EXPECT_EQ(streamed_text, text);
  EXPECT_EQ(streamed_reasoning, reasoning);
  const Json& final_output = events.back()["response"]["output"];
  ASSERT_EQ(final_output.size(), r["output"].size());
  for (size_t i = 0; i < final_output.size(); ++i) {
    EXPECT_EQ(final_output[i]["type"], r["output"][i]["type"]);
    EXPECT_EQ(final_output[i]["content"], r["output"][i]["content"]);
  }
  EXPECT_EQ(events.back()["response"]["usage"]["output_tokens"], r["usage"]["output_tokens"]);
  // Errors keep the OpenAI shape.
  const std::string bad = post(http.port(), "/v1/responses", {{"input", "x"}, {"bogus", 1}});
  EXPECT_EQ(bad.substr(0, 3), "400");
  EXPECT_EQ(Json::parse(bad.substr(3))["error"]["param"], "bogus");
  http.request_stop();
  loop.join();
}

// Refusals after translation (rendering, the context) name the Responses fields.
TEST(ResponsesEndpoint, ContextRefusalsNameTheResponsesFields) {
  EngineOptions eo;
  eo.model_dir = model_dir();
  eo.max_context_tokens = 128;
  std::unique_ptr<Engine> engine = Engine::load(eo);
  ServiceOptions o;
  o.model_id = "tiny";
  Service service(*engine, o);
  HttpServer http({}, [&](const HttpRequest& r, HttpConnection& c) { service.handle(r, c); });
  http.bind("127.0.0.1", 0);
  std::thread loop([&] { http.run(); });
  std::string r = post(http.port(), "/v1/responses", {{"input", std::string(200, 'x')}});
  EXPECT_EQ(r.substr(0, 3), "400");
  EXPECT_EQ(Json::parse(r.substr(3))["error"]["param"], "input");
  EXPECT_EQ(Json::parse(r.substr(3))["error"]["code"], "context_length_exceeded");
  r = post(http.port(), "/v1/responses", {{"input", "x"}, {"max_output_tokens", 100}});
  EXPECT_EQ(r.substr(0, 3), "400");
  EXPECT_EQ(Json::parse(r.substr(3))["error"]["param"], "max_output_tokens");
  // A tool result for a call never made is refused by the K3 encoder, naming the input.
  r = post(
      http.port(), "/v1/responses",
      {{"input", {{{"type", "function_call_output"}, {"call_id", "nobody"}, {"output", "x"}}}}});
  EXPECT_EQ(r.substr(0, 3), "400");
  EXPECT_EQ(Json::parse(r.substr(3))["error"]["param"], "input");
  http.request_stop();
  loop.join();
}

// A memo hit is answered in the Responses shape, with fresh ids, the same output.
TEST(ResponsesEndpoint, MemoHitsReplayAsResponses) {
  std::unique_ptr<Engine> engine = Engine::load({model_dir(), 64});
  ServiceOptions o;
  o.model_id = "tiny";
  Service service(*engine, o);
  HttpServer http({}, [&](const HttpRequest& r, HttpConnection& c) { service.handle(r, c); });
  http.bind("127.0.0.1", 0);
  std::thread loop([&] { http.run(); });
  const Json body = {
      {"input", "Hi"}, {"max_output_tokens", 6}, {"reasoning", {{"effort", "none"}}}};
  std::string head;
  const std::string a = post(http.port(), "/v1/responses", body, &head);
  EXPECT_EQ(head.find("X-Deltafin-Memo"), std::string::npos);
  const std::string b = post(http.port(), "/v1/responses", body, &head);
  EXPECT_NE(head.find("X-Deltafin-Memo: hit"), std::string::npos) << head;
  ASSERT_EQ(b.substr(0, 3), "200");
  const Json ja = Json::parse(a.substr(3)), jb = Json::parse(b.substr(3));
  EXPECT_EQ(service.stats().generations, 1);
  EXPECT_EQ(ja["output"][0]["content"], jb["output"][0]["content"]);
  EXPECT_FALSE(ja["output"][0]["content"][0]["text"].get<std::string>().empty());
  EXPECT_NE(ja["id"], jb["id"]);
  EXPECT_NE(ja["output"][0]["id"], jb["output"][0]["id"]);
  // The same conversation as a chat request is another memo entry but the same text.
  const std::string c = post(http.port(), "/v1/chat/completions",
                             {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                              {"max_tokens", 6},
                              {"thinking", false}});
  EXPECT_EQ(Json::parse(c.substr(3))["choices"][0]["message"]["content"],
            ja["output"][0]["content"][0]["text"]);
  http.request_stop();
  loop.join();
}

}  // namespace
}  // namespace deltafin::server
