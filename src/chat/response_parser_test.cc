// The K3 response parser fed one id at a time: reasoning, content, typed and raw tool calls, the
// end of the message, and characters split across byte-level ids.
#include "chat/response_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace deltafin::chat {
namespace {

// Byte-level vocabulary (every multi-byte character spans several ids) plus K3's markup specials.
tokenizer::Tokenizer k3_like_tokenizer() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  tokens.push_back("Paris");
  return tokenizer::Tokenizer::from_parts(tokens, tokenizer::Pattern::kKimi,
                                          {{"[EOS]", 258},
                                           {"<|end_of_msg|>", 259},
                                           {"<|open|>", 260},
                                           {"<|close|>", 261},
                                           {"<|sep|>", 262}},
                                          0);
}

struct Parsed {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  bool ended = false;
  size_t n_text_events = 0;
};

Parsed parse(const tokenizer::Tokenizer& tok, const std::string& generated, bool thinking,
             bool call_finish = false) {
  ResponseParser parser(tok, thinking);
  Parsed out;
  const auto take = [&](const std::vector<ParseEvent>& events) {
    for (const auto& e : events) {
      if (e.kind == ParseEvent::kReasoning || e.kind == ParseEvent::kContent) {
        EXPECT_TRUE(tokenizer::utf8::is_valid(e.text)) << "partial character in an event";
        ++out.n_text_events;
      }
      if (e.kind == ParseEvent::kReasoning) out.reasoning += e.text;
      if (e.kind == ParseEvent::kContent) out.content += e.text;
      if (e.kind == ParseEvent::kToolCall) out.calls.push_back(e.call);
      if (e.kind == ParseEvent::kEnd) out.ended = true;
    }
  };
  for (const int32_t id : tok.encode_markup(generated)) take(parser.push(id));
  if (call_finish) take(parser.finish());
  return out;
}

TEST(ResponseParser, ReasoningThenContentStreamedById) {
  const auto tok = k3_like_tokenizer();
  const auto p = parse(tok,
                       "Let me think: 巴黎 is 🇫🇷.<|close|>think<|sep|><|open|>response<|sep|>"
                       "It is Paris, 法国的首都。<|close|>response<|sep|><|close|>message<|sep|>"
                       "<|end_of_msg|>ignored after the end",
                       /*thinking=*/true);
  EXPECT_EQ(p.reasoning, "Let me think: 巴黎 is 🇫🇷.");
  EXPECT_EQ(p.content, "It is Paris, 法国的首都。");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_TRUE(p.ended);
  EXPECT_GT(p.n_text_events, 20u);  // streamed as it came, not at the end
}

TEST(ResponseParser, NonThinkingStartsInResponse) {
  const auto tok = k3_like_tokenizer();
  const auto p = parse(tok, "Hi!<|close|>response<|sep|><|close|>message<|sep|>[EOS]", false);
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "Hi!");
  EXPECT_TRUE(p.ended);
}

TEST(ResponseParser, TypedAndRawToolCalls) {
  const auto tok = k3_like_tokenizer();
  const std::string generated =
      "Need weather.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
      "<|open|>tools<|sep|>"
      "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
      "<|open|>argument key=\"city\" type=\"string\"<|sep|>São \"Paulo\"<|close|>argument<|sep|>"
      "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
      "<|open|>argument key=\"opts\" type=\"object\"<|sep|>{\"a\": [1, true]}"
      "<|close|>argument<|sep|>"
      "<|open|>argument key=\"q&amp;a\" type=\"number\"<|sep|>not a number<|close|>argument<|sep|>"
      "<|close|>call<|sep|>"
      "<|open|>call tool=\"raw\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{broken"
      "<|close|>json<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const auto p = parse(tok, generated, true);
  EXPECT_EQ(p.reasoning, "Need weather.");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].id, "call_1");
  EXPECT_EQ(
      p.calls[0].arguments_json,
      R"({"city": "São \"Paulo\"", "days": 3, "opts": {"a": [1, true]}, "q&a": "not a number"})");
  EXPECT_EQ(p.calls[1].name, "raw");
  EXPECT_EQ(p.calls[1].arguments_json, "{broken");
  EXPECT_TRUE(p.ended);
}

TEST(ResponseParser, FinishFlushesAndDropsAnUnfinishedCall) {
  const auto tok = k3_like_tokenizer();
  // Ends inside a character: the held-back bytes come out as U+FFFD on finish.
  const auto p = parse(tok,
                       "ok\xE5\xB7<|close|>think<|sep|><|open|>response<|sep|>done"
                       "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>",
                       true, /*call_finish=*/true);
  EXPECT_EQ(p.reasoning, "ok\xEF\xBF\xBD");
  EXPECT_EQ(p.content, "done");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_FALSE(p.ended);
}

TEST(ResponseParser, NeedsTheMarkupSpecials) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  const auto plain = tokenizer::Tokenizer::from_parts(tokens, tokenizer::Pattern::kKimi, {}, 0);
  EXPECT_THROW(ResponseParser(plain, true), base::Error);
}

}  // namespace
}  // namespace deltafin::chat
