// The public text API on a tiny model folder with a byte-level K3 tokenizer: the folder decides
// the tokenizer and the chat format; generated ids to deltas on crafted ids (the response channels
// and tool calls of K3's chat format, made by rendering an assistant turn, so they are exactly
// what the format says a model emits), stop strings on the answer, and raw continuation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "deltafin/engine.h"
#include "testing/text_model.h"

namespace deltafin {
namespace {

using Json = nlohmann::ordered_json;

const Engine& engine() {
  static const std::unique_ptr<Engine> e = [] {
    EngineOptions o;
    o.model_dir = deltafin::testing::make_text_model(DELTAFIN_SOURCE_DIR, "k3-tiny-a",
                                                     ::testing::TempDir() + "k3-text-model");
    return Engine::load(o);
  }();
  return *e;
}
const Text& text() { return engine().text(); }
const ChatFormat& chat() { return *text().chat(); }

// The ids a model emits for `assistant` after the generation prompt: the rendered conversation
// with the turn, minus the rendered conversation up to the generation prompt.
std::vector<int32_t> response_ids(const Json& assistant, bool thinking = true) {
  const Json user = {{"role", "user"}, {"content", "Weather in Paris?"}};
  Json before = {{"messages", Json::array({user})}, {"thinking", thinking}};
  Json after = {{"messages", Json::array({user, assistant})},
                {"thinking", thinking},
                {"add_generation_prompt", false}};
  const std::vector<int32_t> a = chat().render(before);
  const std::vector<int32_t> b = chat().render(after);
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

Fed feed(TextStream& p, const std::vector<int32_t>& ids) {
  Fed r;
  for (int32_t id : ids) {
    ++r.n_pushed;
    if (!p.push(id, r.deltas)) break;
  }
  p.finish(r.deltas);
  return r;
}

std::unique_ptr<TextStream> response(bool thinking, std::vector<std::string> stops = {},
                                     bool single_tool_call = false) {
  auto n = std::make_shared<int>(0);
  return chat().response({thinking, std::move(stops), single_tool_call,
                          [n] { return "call_test" + std::to_string(++*n); }});
}

TEST(Text, TheFolderDecidesTokenizerChatFormatAndEos) {
  EXPECT_EQ(text().eos_id(), 501);  // config.json's eos_token_id
  EXPECT_EQ(text().encode("Hi"), (std::vector<int32_t>{72, 105}));
  EXPECT_EQ(text().decode({72, 105, 501}), "Hi<|end_of_msg|>");
  ASSERT_NE(text().chat(), nullptr);  // kimi_k3: K3's XTML
  const std::vector<int32_t> prompt =
      chat().render(Json{{"messages", Json::array({{{"role", "user"}, {"content", "Hi"}}})}});
  EXPECT_NE(std::find(prompt.begin(), prompt.end(), 259), prompt.end());  // <|open|>
  EXPECT_THROW(chat().render(Json{{"thinking", true}}), base::Error);     // no messages
  // Kimi-Linear's folders get the same tokenizer but no chat format (its template is not K3's).
  EngineOptions linear;
  linear.model_dir = deltafin::testing::make_text_model(DELTAFIN_SOURCE_DIR, "kimi-linear-tiny",
                                                        ::testing::TempDir() + "linear-text-model");
  const std::unique_ptr<Engine> e = Engine::load(linear);
  EXPECT_EQ(e->text().encode("Hi"), (std::vector<int32_t>{72, 105}));
  EXPECT_EQ(e->text().chat(), nullptr);
  // A folder without tiktoken.model has no text side; the ids still run.
  linear.model_dir = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/kimi-linear-tiny";
  EXPECT_THROW(Engine::load(linear)->text(), base::Error);
}

TEST(ChatResponse, SplitsReasoningAndAnswer) {
  const Json turn = {
      {"role", "assistant"}, {"reasoning_content", "Let me think."}, {"content", "Hello, world!"}};
  const std::vector<int32_t> ids = response_ids(turn);
  auto p = response(true);
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

TEST(ChatResponse, ParsesToolCalls) {
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
  auto p = response(true);
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
  auto single = response(true, {}, true);
  const Fed one = feed(*single, ids);
  EXPECT_LT(one.n_pushed, ids.size());
  int n = 0;
  for (const Delta& d : one.deltas) n += d.kind == Delta::Kind::kToolCall;
  EXPECT_EQ(n, 1);
}

TEST(ChatResponse, StopStringsApplyToTheAnswerOnly) {
  const Json turn = {{"role", "assistant"},
                     {"reasoning_content", "the world is big"},
                     {"content", "Hello, world! More."}};
  const std::vector<int32_t> ids = response_ids(turn);
  auto p = response(true, {"world"});
  const Fed r = feed(*p, ids);
  EXPECT_EQ(r.text(Delta::Kind::kReasoning), "the world is big");
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Hello, ");
  EXPECT_TRUE(p->stopped_by_string());
  EXPECT_LT(r.n_pushed, ids.size());
}

TEST(ChatResponse, WithoutThinkingEverythingIsAnswer) {
  const Json turn = {{"role", "assistant"}, {"content", "Plain."}};
  auto p = response(false);
  const Fed r = feed(*p, response_ids(turn, false));
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Plain.");
  EXPECT_EQ(r.text(Delta::Kind::kReasoning), "");
  EXPECT_EQ(p->reasoning_tokens(), 0);
}

TEST(ChatResponse, CutOffMidAnswerKeepsHeldText) {
  // No end of message (a token limit): held-back text that might have begun a stop string is
  // still shown.
  std::vector<int32_t> ids = response_ids({{"role", "assistant"}, {"content", "abc wor"}});
  ids.resize(ids.size() -
             20);  // without <|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>
  auto p = response(true, {"world"});
  const Fed r = feed(*p, ids);
  EXPECT_EQ(r.text(Delta::Kind::kContent), "abc wor");
  EXPECT_FALSE(p->stopped_by_string());
}

TEST(Completion, DecodesWholeCharactersAndStops) {
  const std::vector<int32_t> ids = text().encode("Grüße, 世界! STOP here");
  auto p = text().completion({});
  Fed r = feed(*p, ids);
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Grüße, 世界! STOP here");
  for (const Delta& d : r.deltas)  // one byte per id, but never half a character
    EXPECT_EQ(text().decode(text().encode(d.text)), d.text);
  auto s = text().completion({" STOP"});
  r = feed(*s, ids);
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Grüße, 世界!");
  EXPECT_TRUE(s->stopped_by_string());
  // The end-of-sequence id shows nothing.
  auto e = text().completion({});
  r = feed(*e, {72, 105, 501});
  EXPECT_EQ(r.text(Delta::Kind::kContent), "Hi");
}

}  // namespace
}  // namespace deltafin
