// Request validation: what is accepted, what each refusal names, and that an OpenAI request
// reaches the K3 renderer exactly as the upstream encoder's inputs (the XTML fixtures).
#include "server/request.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "deltafin/engine.h"
#include "server/api_error.h"
#include "testing/text_model.h"

namespace deltafin::server {
namespace {

using Json = nlohmann::ordered_json;

RequestLimits limits() {
  RequestLimits l;
  l.max_tokens_limit = 100;
  l.vocab_size = 1000;
  l.model_names = {"demo", "owner/demo"};
  return l;
}

// The refusal a chat body gets: "status param code", or "ok".
std::string chat_verdict(const std::string& body) {
  try {
    parse_chat_request(body, limits());
    return "ok";
  } catch (const ApiError& e) {
    return std::to_string(e.status) + " " + e.param + " " + e.code;
  }
}

std::string completion_verdict(const std::string& body) {
  try {
    parse_completion_request(body, limits());
    return "ok";
  } catch (const ApiError& e) {
    return std::to_string(e.status) + " " + e.param + " " + e.code;
  }
}

std::string with(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"hi"}])" + (extra.empty() ? "" : "," + extra) +
         "}";
}

TEST(ChatRequest, Defaults) {
  const ChatRequest r = parse_chat_request(with(""), limits());
  EXPECT_EQ(r.gen.max_tokens, 100);  // the ceiling
  EXPECT_EQ(r.gen.temperature, 0.0);
  EXPECT_TRUE(r.gen.deterministic());
  EXPECT_FALSE(r.gen.stream);
  EXPECT_TRUE(r.thinking);
  EXPECT_EQ(r.render_input["thinking"], true);
  EXPECT_EQ(r.render_input["messages"][0]["content"], "hi");
}

TEST(ChatRequest, AcceptsWhatItHonours) {
  const ChatRequest r = parse_chat_request(
      with(R"("model":"owner/demo","stream":true,"stream_options":{"include_usage":true},)"
           R"("max_completion_tokens":7,"temperature":0.7,"top_p":0.9,"top_k":40,"seed":-5,)"
           R"("stop":["a","b"],"n":1,"reasoning_effort":"low","frequency_penalty":0,)"
           R"("logprobs":null,"user":"u","logit_bias":{},"service_tier":"auto")"),
      limits());
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  EXPECT_DOUBLE_EQ(r.gen.temperature, 0.7);
  EXPECT_FLOAT_EQ(r.gen.top_p, 0.9);
  EXPECT_EQ(r.gen.top_k, 40);
  EXPECT_EQ(r.gen.seed, static_cast<uint64_t>(-5));
  EXPECT_TRUE(r.gen.deterministic());
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.render_input["thinking_effort"], "low");
  EXPECT_FALSE(parse_chat_request(with(R"("temperature":1)"), limits()).gen.deterministic());
  EXPECT_EQ(parse_chat_request(with(R"("stop":"x","top_k":-1)"), limits()).gen.top_k, 0);
  EXPECT_FALSE(parse_chat_request(with(R"("thinking":{"type":"disabled"})"), limits()).thinking);
  EXPECT_EQ(parse_chat_request(with(R"("max_tokens":16.0)"), limits()).gen.max_tokens, 16);
}

// Refusals in the user's terms: the field, and what is wrong with it, not the JSON library's.
TEST(ChatRequest, RefusesInTheUsersTerms) {
  EXPECT_EQ(chat_verdict(with(R"("tools":{})")), "400 tools invalid_type");
  EXPECT_EQ(chat_verdict(with(R"("tools":{"type":"function"})")), "400 tools invalid_type");
  EXPECT_EQ(chat_verdict(with(R"("tools":"f")")), "400 tools invalid_type");
  EXPECT_EQ(chat_verdict(with(R"("tools":[])")), "ok");
  // Integers past 64 bits (held by the JSON library as floats) are out of range, not "not an
  // integer".
  EXPECT_EQ(chat_verdict(with(R"("max_tokens":100000000000000000000)")),
            "400 max_tokens invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("seed":-99999999999999999999)")), "400 seed invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("seed":18446744073709551616)")), "400 seed invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("seed":18446744073709551615)")), "ok");
  try {
    parse_chat_request(with(R"("max_tokens":100000000000000000000)"), limits());
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(e.message.find("out of range"), std::string::npos) << e.message;
  }
  try {
    parse_chat_request(with(R"("tools":{})"), limits());
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.message, "field tools: expected an array, got {}");
  }
}

// SDKs send the neutral values of fields the server does not implement; they change nothing.
TEST(ChatRequest, AcceptsNeutralValuesOfUnsupportedFields) {
  EXPECT_EQ(chat_verdict(with(R"("logprobs":false)")), "ok");
  EXPECT_EQ(chat_verdict(with(R"("top_logprobs":0)")), "ok");
  EXPECT_EQ(chat_verdict(with(R"("store":false)")), "ok");
  EXPECT_EQ(chat_verdict(with(R"("logprobs":false,"top_logprobs":0,"store":false)")), "ok");
  EXPECT_EQ(chat_verdict(with(R"("logprobs":"no")")), "400 logprobs invalid_type");
  EXPECT_EQ(chat_verdict(with(R"("store":0)")), "400 store invalid_type");
  EXPECT_EQ(chat_verdict(with(R"("top_logprobs":21)")), "400 top_logprobs invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("top_logprobs":-1)")), "400 top_logprobs invalid_value");
}

TEST(ChatRequest, RefusesWhatItCannotHonour) {
  EXPECT_EQ(chat_verdict("{"), "400  invalid_json");
  EXPECT_EQ(chat_verdict("[]"), "400  invalid_type");
  EXPECT_EQ(chat_verdict(R"({"messages":[]})"), "400 messages invalid_value");
  EXPECT_EQ(chat_verdict("{}"), "400 messages invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("n":2)")), "400 n unsupported_value");
  EXPECT_EQ(chat_verdict(with(R"("logprobs":true)")), "400 logprobs unsupported_parameter");
  EXPECT_EQ(chat_verdict(with(R"("top_logprobs":2)")), "400 top_logprobs unsupported_parameter");
  EXPECT_EQ(chat_verdict(with(R"("presence_penalty":0.5)")),
            "400 presence_penalty unsupported_parameter");
  EXPECT_EQ(chat_verdict(with(R"("logit_bias":{"5":1})")), "400 logit_bias unsupported_parameter");
  EXPECT_EQ(chat_verdict(with(R"("frobnicate":1)")), "400 frobnicate unknown_parameter");
  EXPECT_EQ(chat_verdict(with(R"("functions":[])")), "400 functions unsupported_parameter");
  EXPECT_EQ(chat_verdict(with(R"("store":true)")), "400 store unsupported_parameter");
  EXPECT_EQ(chat_verdict(with(R"("reasoning_effort":"medium")")),
            "400 reasoning_effort unsupported_value");
  EXPECT_EQ(chat_verdict(with(R"("reasoning_effort":"minimal")")),
            "400 reasoning_effort unsupported_value");
  EXPECT_EQ(chat_verdict(with(R"("max_tokens":101)")), "400 max_tokens invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("max_tokens":0)")), "400 max_tokens invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("max_tokens":5,"max_completion_tokens":6)")),
            "400 max_completion_tokens invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("max_tokens":"5")")), "400 max_tokens invalid_type");
  EXPECT_EQ(chat_verdict(with(R"("temperature":2.5)")), "400 temperature invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("top_p":-0.1)")), "400 top_p invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("stop":["a","b","c","d","e"])")), "400 stop invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("stop":"")")), "400 stop invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("stop":")" + std::string(1025, 'x') + "\"")),
            "400 stop invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("stop":[1])")), "400 stop invalid_type");
  EXPECT_EQ(chat_verdict(with(R"("stream_options":{"include_usage":true})")),
            "400 stream_options invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("stream":true,"stream_options":{"x":1})")),
            "400 stream_options.x unknown_parameter");
  EXPECT_EQ(chat_verdict(with(R"("model":"gpt-4")")), "404 model model_not_found");
  EXPECT_EQ(chat_verdict(with(R"("tool_choice":"auto")")), "400 tool_choice invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("response_format":{"type":"yaml"})")),
            "400 response_format.type invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("thinking":{"type":"maybe"})")),
            "400 thinking.type invalid_value");
  EXPECT_EQ(chat_verdict(with(R"("modalities":["text","audio"])")),
            "400 modalities unsupported_value");
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  EXPECT_EQ(chat_verdict(with(tools + R"(,"tool_choice":"required","parallel_tool_calls":false)")),
            "ok");
  EXPECT_EQ(
      chat_verdict(with(tools + R"(,"tool_choice":{"type":"function","function":{"name":"f"}})")),
      "400 tool_choice unsupported_value");
  EXPECT_EQ(
      chat_verdict(with(R"("tools":[{"type":"function","function":{"name":"f","strict":true}}])")),
      "400 tools[0].function.strict unsupported_value");
  EXPECT_EQ(chat_verdict(with(R"("tools":[{"type":"code_interpreter"}])")),
            "400 tools[0].type unsupported_value");
}

TEST(ChatRequest, ChecksMessages) {
  const auto msg = [](const std::string& m) { return chat_verdict(R"({"messages":[)" + m + "]}"); };
  EXPECT_EQ(msg(R"({"role":"user","content":[{"type":"text","text":"a"}]})"), "ok");
  EXPECT_EQ(msg(R"({"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]})"),
            "400 messages[0].content[0].type unsupported_value");
  EXPECT_EQ(msg(R"({"role":"user"})"), "400 messages[0].content invalid_value");
  EXPECT_EQ(msg(R"({"content":"x"})"), "400 messages[0].role invalid_value");
  EXPECT_EQ(msg(R"({"role":"function","content":"x"})"), "400 messages[0].role unsupported_value");
  EXPECT_EQ(msg(R"({"role":"user","content":"x","extra":1})"),
            "400 messages[0].extra unknown_parameter");
  EXPECT_EQ(msg(R"({"role":"tool","content":"x"})"), "400 messages[0].tool_call_id invalid_value");
  // An SDK echoing an assistant message back: null refusal and empty annotations are fine.
  EXPECT_EQ(msg(R"({"role":"user","content":"x"},{"role":"assistant","content":null,)"
                R"("refusal":null,"annotations":[],"tool_calls":[{"id":"c","type":"function",)"
                R"("function":{"name":"f","arguments":"{}"}}]})"),
            "ok");
  EXPECT_EQ(msg(R"({"role":"assistant","content":"x","refusal":"no"})"),
            "400 messages[0].refusal unsupported_parameter");
  const ChatRequest r = parse_chat_request(
      R"({"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":"x"}]})",
      limits());
  EXPECT_EQ(r.render_input["messages"][0]["role"], "system");
}

// The refusal's message: it names the full field path and what was expected.
std::string chat_message(const std::string& body) {
  try {
    parse_chat_request(body, limits());
    return "ok";
  } catch (const ApiError& e) {
    return e.message;
  }
}

TEST(ChatRequest, MessagesNameTheFieldAndWhatWasExpected) {
  EXPECT_EQ(chat_message(with(R"("max_tokens":"5")")),
            "field max_tokens: expected an integer in [1, 2147483647], got \"5\"");
  EXPECT_EQ(chat_message(with(R"("temperature":2.5)")),
            "field temperature: expected a number in [0, 2], got 2.5");
  EXPECT_EQ(chat_message(R"({"messages":[{"role":"user","content":"x"},{"role":"user"}]})"),
            "field messages[1].content: missing");
  EXPECT_EQ(chat_message(R"({"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})"),
            "field messages[0].content[0].text: expected a string, got 1");
  EXPECT_EQ(chat_message(with(R"("stream":true,"stream_options":{"x":1})")),
            "field stream_options.x: unknown field");
  EXPECT_EQ(chat_message(with(R"("store":true)")),
            "field store: stored completions are not supported");
  EXPECT_EQ(chat_message("[]"), "the request body: expected an object, got []");
  const std::string invalid = chat_message("{");
  EXPECT_EQ(invalid.rfind("the request body: invalid JSON: parse error at line 1, column 2", 0), 0u)
      << invalid;
}

TEST(ChatRequest, RefusesDeepNestingBeforeParsing) {
  std::string deep = with(R"("metadata":)" + std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(chat_verdict(deep), "400  invalid_json");
}

TEST(CompletionRequest, PromptsAndDefaults) {
  CompletionRequest r = parse_completion_request(R"({"prompt":"hello"})", limits());
  EXPECT_EQ(r.prompt_text, "hello");
  EXPECT_EQ(r.gen.max_tokens, 16);
  r = parse_completion_request(R"({"prompt":[[1,2,999]],"max_tokens":0,"echo":true})", limits());
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 999}));
  EXPECT_EQ(r.gen.max_tokens, 0);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(parse_completion_request(R"({"prompt":["x"]})", limits()).prompt_text, "x");
  EXPECT_EQ(completion_verdict(R"({"prompt":[1000]})"), "400 prompt invalid_value");
  EXPECT_EQ(completion_verdict(R"({"prompt":["a","b"]})"), "400 prompt invalid_value");
  EXPECT_EQ(completion_verdict(R"({"prompt":""})"), "400 prompt invalid_value");
  EXPECT_EQ(completion_verdict(R"({"prompt":[]})"), "400 prompt invalid_value");
  EXPECT_EQ(completion_verdict(R"({})"), "400 prompt invalid_value");
  EXPECT_EQ(completion_verdict(R"({"prompt":"x","best_of":2})"), "400 best_of unsupported_value");
  EXPECT_EQ(completion_verdict(R"({"prompt":"x","suffix":"y"})"),
            "400 suffix unsupported_parameter");
  EXPECT_EQ(completion_verdict(R"({"prompt":"x","logprobs":1})"),
            "400 logprobs unsupported_parameter");
  EXPECT_EQ(completion_verdict(R"({"prompt":"x","messages":[]})"),
            "400 messages unknown_parameter");
  EXPECT_EQ(completion_verdict(R"({"prompt":"x","max_tokens":-1})"),
            "400 max_tokens invalid_value");
}

// Every XTML fixture whose input an OpenAI request can express renders the same prompt when it
// arrives as a request as the fixture's own input does (which the chat tests match with the
// upstream encoder's segments): the request->prompt direction of tools, reasoning and formats.
TEST(ChatRequest, ReachesTheRendererAsUpstreamInputs) {
  EngineOptions o;
  o.model_dir = deltafin::testing::make_text_model(DELTAFIN_SOURCE_DIR, "k3-tiny-a",
                                                   ::testing::TempDir() + "request-text-model");
  const std::unique_ptr<Engine> engine = Engine::load(o);
  const ChatFormat& chat = *engine->text().chat();
  std::ifstream in(DELTAFIN_SOURCE_DIR "/tests/fixtures/xtml/k3-chat-cases.json");
  ASSERT_TRUE(in);
  const Json cases = Json::parse(in)["cases"];
  // Inputs an OpenAI request cannot express (images, upstream-only keys) are refused.
  const std::set<std::string> refused = {"image_part",
                                         "two_images",
                                         "tool_result_explicit_name",
                                         "no_generation_prompt",
                                         "response_format_schema_inline",
                                         "thinking_effort_without_thinking"};
  int n_compared = 0;
  for (const auto& [name, c] : cases.items()) {
    if (name == "image_placeholder_in_text") continue;  // the placeholder stays text here
    const Json& input = c["input"];
    Json body = Json::object();
    for (const auto& [key, value] : input.items()) {
      if (key == "thinking_effort")
        body["reasoning_effort"] = value;
      else if (key == "thinking")
        body["thinking"] = {{"type", value.get<bool>() ? "enabled" : "disabled"}};
      else if (key != "image_prompts")
        body[key] = value;
    }
    if (refused.count(name)) {
      EXPECT_THROW(parse_chat_request(body.dump(), limits()), ApiError) << name;
      continue;
    }
    const ChatRequest r = parse_chat_request(body.dump(), limits());
    EXPECT_EQ(chat.render(r.render_input), chat.render(input)) << name;
    ++n_compared;
  }
  EXPECT_GE(n_compared, 17);
}

}  // namespace
}  // namespace deltafin::server
