// The tokenizer of a synthetic Qwen3 drafter: tokenizer.json in HF's byte-level BPE form (BPE
// vocab + merges learned on the built-in English text with Qwen's pre-tokenizer, NFC, Split +
// ByteLevel, ByteLevel decoder, Qwen3's 26 added tokens) and tokenizer_config.json.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "synth/tokenizer_files.h"

namespace deltafin::synth {

// Qwen's Split regex (single digits, unlike K3's groups of three).
inline constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Splits ASCII text the way kQwenPattern does, for training.
std::vector<std::string_view> pretokenize_qwen_ascii(std::string_view text);

// Qwen3's added tokens, ids base_vocab + index (Qwen3: 151643 <|endoftext|> ... 151668 </think>).
struct QwenAddedToken {
  const char* content;
  bool special;
};
const std::vector<QwenAddedToken>& qwen_added_tokens();

// BPE with exactly `base_vocab` tokens: up to 640 learned on the English text with Qwen's
// pre-tokenizer, then (for Qwen3's 151,643) two- and three-byte filler tokens from 0x80..0xFF,
// each with the merge that makes it. Deterministic.
BpeVocab qwen_bpe(int base_vocab);

// GPT-2's byte-to-character map as UTF-8: printable bytes stand for themselves, the others for
// U+0100 onwards (space is "Ġ").
std::string byte_level_encode(std::string_view bytes);

std::string qwen_tokenizer_json(const BpeVocab& bpe);
std::string qwen_tokenizer_config_json(int base_vocab);

}  // namespace deltafin::synth
