// Generated ids to deltas, on crafted ids: the response channels and tool calls of K3's chat
// format (made by rendering an assistant turn, so they are exactly what the format says a model
// emits), stop strings on the answer, and raw continuation.
#include "server/pipeline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/k3_render.h"
#include "server/test_tokenizer.h"

namespace deltafin::server {
namespace {

using Json = nlohmann::ordered_json;

const tokenizer::Tokenizer& tok() {
  static const tokenizer::Tokenizer t = testing::k3_byte_tokenizer();
  return t;
}

// The ids a model emits for `assistant` after the generation prompt: the rendered conversation
// with the turn, minus the rendered conversation up to the generation prompt.
std::vector<int32_t> response_ids(const Json& assistant, bool thinking = true) {
  const Json user = {{"role", "user"}, {"content", "Weather in Paris?"}};
  Json before = {{"messages", Json::array({user})}, {"thinking", thinking}};
  Json after = {{"messages", Json::array({user, assistant})},
                {"thinking", thinking},
                {"add_generation_prompt", false}};
  const std::vector<int32_t> a = chat::tokenize_segments(tok(), chat::render_k3(before));
  const std::vector<int32_t> b = chat::tokenize_segments(tok(), chat::render_k3(after));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()));
  return std::vector<int32_t>(b.begin() + a.size(), b.end());
}

struct Fed {
  std::vector<Delta> deltas;
  size_t n_pushed = 0;  // ids consumed before push() said the response is complete
  std::string text(Delta::Kind kind) const {
    std::string out;
    for (const Delta& d : deltas)
      if (d.kind == kind) out += d.text;
    return out;
  }
};

Fed feed(TextPipeline& p, const std::vector<int32_t>& ids) {
  Fed r;
  for (int32_t id : ids) {
    ++r.n_pushed;
    if (!p.push(id, r.deltas)) break;
  }
  p.finish(r.deltas);
  return r;
}

std::function<std::string()> numbered_ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_test" + std::to_string(++*n); };
}

TEST(ChatPipeline, SplitsReasoningAndAnswer) {
  const Json turn = {
      {"role", "assistant"}, {"reasoning_content", "Let me think."}, {"content", "Hello, world!"}};
  const std::vector<int32_t> ids = response_ids(turn);
  auto p = make_chat_pipeline(tok(), true, {}, false, numbered_ids());
  const Fed r = feed(*p, ids);
  EXPECT_EQ(r.text(Delta::Kind::kReasoning), "Let me think.");
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Hello, world!");
  EXPECT_EQ(p->reasoning_tokens(), 13);  // one id per byte of the reasoning
  EXPECT_FALSE(p->saw_tool_call());
  EXPECT_EQ(ids.back(), 501);  // <|end_of_msg|>
  EXPECT_EQ(r.n_pushed, ids.size());
  const Json back = {{"role", "assistant"},
                     {"reasoning_content", r.text(Delta::Kind::kReasoning)},
                     {"content", r.text(Delta::Kind::kContent)}};
  EXPECT_EQ(response_ids(back), ids);  // the turn sent back extends the kept state exactly
}

TEST(ChatPipeline, ParsesToolCalls) {
  const Json turn = {
      {"role", "assistant"},
      {"reasoning_content", "Need the tool."},
      {"content", ""},
      {"tool_calls",
       Json::array({{{"id", "x"},
                     {"type", "function"},
                     {"function",
                      {{"name", "get_weather"}, {"arguments", R"({"city":"Paris","days":3})"}}}},
                    {{"id", "y"},
                     {"type", "function"},
                     {"function", {{"name", "get_time"}, {"arguments", R"({"tz":"CET"})"}}}}})}};
  const std::vector<int32_t> ids = response_ids(turn);
  auto p = make_chat_pipeline(tok(), true, {}, false, numbered_ids());
  const Fed r = feed(*p, ids);
  std::vector<ToolCall> calls;
  for (const Delta& d : r.deltas)
    if (d.kind == Delta::Kind::kToolCall) calls.push_back(d.call);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_TRUE(p->saw_tool_call());
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(calls[0].arguments), Json::parse(R"({"city":"Paris","days":3})"));
  EXPECT_EQ(calls[0].id, "call_test1");
  EXPECT_EQ(calls[1].name, "get_time");
  EXPECT_EQ(Json::parse(calls[1].arguments), Json::parse(R"({"tz":"CET"})"));
  EXPECT_EQ(r.text(Delta::Kind::kContent), "");
  EXPECT_EQ(r.text(Delta::Kind::kReasoning), "Need the tool.");

  // What a client sends back for this turn renders to the very ids the model generated, so the
  // next request extends the server's kept state.
  Json back = {{"role", "assistant"},
               {"reasoning_content", r.text(Delta::Kind::kReasoning)},
               {"content", r.text(Delta::Kind::kContent)},
               {"tool_calls", Json::array()}};
  for (const ToolCall& c : calls)
    back["tool_calls"].push_back({{"id", c.id},
                                  {"type", "function"},
                                  {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  EXPECT_EQ(response_ids(back), ids);

  // parallel_tool_calls = false: the response ends with the first call.
  auto single = make_chat_pipeline(tok(), true, {}, true, numbered_ids());
  const Fed one = feed(*single, ids);
  EXPECT_LT(one.n_pushed, ids.size());
  int n = 0;
  for (const Delta& d : one.deltas) n += d.kind == Delta::Kind::kToolCall;
  EXPECT_EQ(n, 1);
}

TEST(ChatPipeline, StopStringsApplyToTheAnswerOnly) {
  const Json turn = {{"role", "assistant"},
                     {"reasoning_content", "the world is big"},
                     {"content", "Hello, world! More."}};
  const std::vector<int32_t> ids = response_ids(turn);
  auto p = make_chat_pipeline(tok(), true, {"world"}, false, numbered_ids());
  const Fed r = feed(*p, ids);
  EXPECT_EQ(r.text(Delta::Kind::kReasoning), "the world is big");
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Hello, ");
  EXPECT_TRUE(p->stopped_by_string());
  EXPECT_LT(r.n_pushed, ids.size());
}

TEST(ChatPipeline, WithoutThinkingEverythingIsAnswer) {
  const Json turn = {{"role", "assistant"}, {"content", "Plain."}};
  auto p = make_chat_pipeline(tok(), false, {}, false, numbered_ids());
  const Fed r = feed(*p, response_ids(turn, false));
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Plain.");
  EXPECT_EQ(r.text(Delta::Kind::kReasoning), "");
  EXPECT_EQ(p->reasoning_tokens(), 0);
}

TEST(ChatPipeline, CutOffMidAnswerKeepsHeldText) {
  // No end of message (a token limit): held-back text that might have begun a stop string is
  // still shown.
  std::vector<int32_t> ids = response_ids({{"role", "assistant"}, {"content", "abc wor"}});
  ids.resize(ids.size() -
             20);  // without <|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>
  auto p = make_chat_pipeline(tok(), true, {"world"}, false, numbered_ids());
  const Fed r = feed(*p, ids);
  EXPECT_EQ(r.text(Delta::Kind::kContent), "abc wor");
  EXPECT_FALSE(p->stopped_by_string());
}

TEST(CompletionPipeline, DecodesWholeCharactersAndStops) {
  const std::vector<int32_t> ids = tok().encode_ordinary("Grüße, 世界! STOP here");
  auto p = make_completion_pipeline(tok(), 501, {});
  Fed r = feed(*p, ids);
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Grüße, 世界! STOP here");
  for (const Delta& d : r.deltas)  // one byte per id, but never half a character
    EXPECT_EQ(tok().decode(tok().encode_ordinary(d.text)), d.text);
  auto s = make_completion_pipeline(tok(), 501, {" STOP"});
  r = feed(*s, ids);
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Grüße, 世界!");
  EXPECT_TRUE(s->stopped_by_string());
  // The end-of-sequence id shows nothing.
  auto e = make_completion_pipeline(tok(), 501, {});
  r = feed(*e, {72, 105, 501});
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Hi");
}

}  // namespace
}  // namespace deltafin::server
