// The byte-level BPE vocabulary: every token's bytes by rank (rank == id) and a hash table from
// bytes to rank, plus the reader for tiktoken's `tiktoken.model` text format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin::tokenizer {

using Rank = uint32_t;
inline constexpr Rank kNoRank = UINT32_MAX;

class Vocab {
 public:
  // tokens[rank] holds the bytes of that rank; an empty entry is a gap (rank not used). Every one
  // of the 256 single bytes must be a token (otherwise some inputs could not be encoded), and no
  // byte string may appear twice. `source` names the origin in error messages.
  static Vocab from_tokens(std::vector<std::string> tokens, const std::string& source);
  // Reads `base64(bytes) SP rank` lines, as tiktoken's load_tiktoken_bpe does.
  static Vocab load_tiktoken_file(const std::string& path);

  // Rank of exactly these bytes, or kNoRank.
  Rank find(const uint8_t* bytes, size_t n_bytes) const;
  Rank find(std::string_view bytes) const {
    return find(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  Rank byte_rank(uint8_t byte) const { return byte_ranks_[byte]; }

  // One past the largest rank.
  int32_t size() const { return static_cast<int32_t>(offsets_.size() - 1); }
  bool has(int32_t rank) const;
  std::string_view bytes(int32_t rank) const {
    return std::string_view(arena_).substr(offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }

 private:
  struct Slot {
    uint32_t tag = 0;  // high bits of the hash, to skip most byte compares
    Rank rank = kNoRank;
  };

  std::string arena_;              // all token bytes, concatenated by rank
  std::vector<uint32_t> offsets_;  // [size + 1]: token r is arena_[offsets_[r], offsets_[r + 1])
  std::vector<Slot> slots_;        // open addressing, power-of-two size, load factor <= 1/2
  uint64_t mask_ = 0;
  Rank byte_ranks_[256] = {};
};

// Decodes standard base64 with padding; nullopt when `text` is not valid base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace deltafin::tokenizer
