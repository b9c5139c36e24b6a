// Kimi K3's chat format ("XTML"), rendered into segments exactly as the release's encoding_k3.py
// (build_chat_segments) does, and the per-segment tokenization the model was trained on.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deltafin::chat {

// A run of prompt text and how it is tokenized: markup with special tokens allowed (the XTML
// brackets and media blocks), everything else with special tokens disabled.
struct Segment {
  std::string text;
  bool is_markup;
  bool operator==(const Segment&) const = default;
};

// The renderer's arguments as one object: messages (required), tools, thinking (default true),
// thinking_effort (low | high | max; anything else is refused while thinking is on),
// add_generation_prompt (default true), tool_choice, response_format, response_schema,
// image_prompts (one media block per image part or <|kimi_image_placeholder|>; absent/null leaves
// placeholders as they are). Other keys are ignored, as upstream's **kwargs are.
// Throws base::Error for input upstream rejects, and for non-scalar values where it expects text.
// Pass an ordered_json to keep the caller's key order in tool arguments given as objects (upstream
// renders them in dict order); a plain json has already sorted them.
std::vector<Segment> render_k3(const nlohmann::ordered_json& input);
std::vector<Segment> render_k3(const nlohmann::json& input);

// Each segment encoded on its own (merging segments would change the ids) and concatenated.
std::vector<int32_t> tokenize_segments(const tokenizer::Tokenizer& tokenizer,
                                       const std::vector<Segment>& segments);

}  // namespace deltafin::chat
