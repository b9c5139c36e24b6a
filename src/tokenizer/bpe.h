// tiktoken's byte-pair encoding of one pre-tokenized piece: repeatedly merge the adjacent pair
// whose concatenated bytes have the lowest rank (the leftmost pair on ties) until no adjacent
// pair is a token.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace deltafin::tokenizer {

// Appends the ids of `piece` (non-empty) to `out`.
void byte_pair_encode(const Vocab& vocab, std::string_view piece, std::vector<int32_t>& out);

// The straightforward O(n^2) form, kept as the reference the fast paths are tested against.
void byte_pair_encode_reference(const Vocab& vocab, std::string_view piece,
                                std::vector<int32_t>& out);

}  // namespace deltafin::tokenizer
