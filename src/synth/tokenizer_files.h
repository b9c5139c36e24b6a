// The tokenizer files of a synthetic checkpoint: a tiktoken.model whose ranks are learned by BPE
// from built-in English text, and a tokenizer_config.json naming K3's special tokens at K3's
// offsets from the end of the base vocabulary.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin::synth {

// K3's named reserved tokens: id = base_vocab + offset (K3: base_vocab 163584). `special` is the
// flag tokenizer_config.json gives them (<|open|>, <|close|>, <|sep|> are not "special" there).
struct NamedToken {
  int offset;
  const char* content;
  bool special;
};
const std::vector<NamedToken>& k3_named_tokens();
// Offsets of the ids config.json names.
inline constexpr int kBosOffset = 0;     // [BOS]
inline constexpr int kEosOffset = 2;     // <|end_of_msg|>, config and generation eos
inline constexpr int kMediaOffset = 21;  // <|media_pad|>, media_placeholder_token_id
inline constexpr int kPadOffset = 255;   // [PAD]

std::string_view english_corpus();

// The 256 single bytes in rank order: printable bytes first, as tiktoken / K3 number them
// ("!" is rank 0, " " rank 220, "\n" rank 198).
std::vector<unsigned char> byte_rank_order();

// Whether single-byte rank r (< 256) is printable ASCII, tab, newline or space; the demo model
// damps the logits of the other 165 bytes so that its output reads as text.
bool is_text_byte_rank(int rank);

// Splits ASCII text the way K3's pre-tokenizer regex does (spec/kimi-k3.md §5), for training.
std::vector<std::string_view> pretokenize_ascii(std::string_view text);

// Byte-level BPE: returns the token byte strings by rank, the 256 single bytes first, then one
// token per merge (the most frequent adjacent pair, ties to the smallest pair of ranks), until
// `n_tokens` tokens exist. Deterministic.
std::vector<std::string> train_bpe(std::string_view text, int n_tokens);
// The same training on given pre-tokenized pieces, with the merges in the order they were learned
// (pairs of token ids; a merge whose bytes already had a token reuses it).
struct BpeVocab {
  std::vector<std::string> tokens;
  std::vector<std::pair<int, int>> merges;
};
BpeVocab train_bpe_pieces(const std::vector<std::string_view>& pieces, int n_tokens);

// The ranks of a synthetic tokenizer with exactly `base_vocab` entries: BPE on the built-in
// English text (up to 768 tokens), then, for K3's 163,584, filler tokens of two and three bytes
// from 0x80..0xFF. Fillers never occur in ASCII text, and like every rank they split into exactly
// two lower-ranked tokens (the invariant converters from tiktoken to merge lists rely on).
std::vector<std::string> synth_tokenizer_ranks(int base_vocab);

// "base64 rank\n" per token, as tiktoken's load_tiktoken_bpe reads.
std::string tiktoken_model_text(const std::vector<std::string>& tokens);

// tokenizer_config.json in the release's form for a base vocabulary of `base_vocab` ranks.
std::string tokenizer_config_json(int base_vocab);

}  // namespace deltafin::synth
