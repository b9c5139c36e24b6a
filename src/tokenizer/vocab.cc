// Vocabulary storage and the tiktoken.model reader (see vocab.h).
#include "tokenizer/vocab.h"

#include <charconv>
#include <cstring>
#include <fstream>

#include "base/error.h"

namespace deltafin::tokenizer {
namespace {

// A multiply-xorshift hash over 8-byte words: the keys are short (most under 16 bytes), so a
// cheap mix beats a general-purpose hash here and the table is only ever probed with vocab bytes.
uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  std::memcpy(&v, p, n);
  h = (h ^ v) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int n_pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++n_pad;
        continue;
      }
      if (n_pad > 0) return std::nullopt;  // data after padding
      v[k] = base64_value(c);
      if (v[k] < 0) return std::nullopt;
    }
    const uint32_t word = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out.push_back(static_cast<char>(word >> 16));
    if (n_pad < 2) out.push_back(static_cast<char>((word >> 8) & 0xFF));
    if (n_pad < 1) out.push_back(static_cast<char>(word & 0xFF));
  }
  return out;
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens, const std::string& source) {
  Vocab vocab;
  size_t n_bytes = 0;
  size_t n_used = 0;
  for (const auto& t : tokens) {
    n_bytes += t.size();
    n_used += !t.empty();
  }
  if (n_bytes >= UINT32_MAX) base::fail(source, ": vocabulary is larger than 4 GiB");
  vocab.arena_.reserve(n_bytes);
  vocab.offsets_.reserve(tokens.size() + 1);
  for (const auto& t : tokens) {
    vocab.offsets_.push_back(static_cast<uint32_t>(vocab.arena_.size()));
    vocab.arena_ += t;
  }
  vocab.offsets_.push_back(static_cast<uint32_t>(vocab.arena_.size()));

  size_t n_slots = 16;
  while (n_slots < 2 * n_used) n_slots *= 2;
  vocab.slots_.assign(n_slots, Slot{});
  vocab.mask_ = n_slots - 1;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const auto bytes = vocab.bytes(static_cast<int32_t>(r));
    if (bytes.empty()) continue;
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    const uint64_t h = hash_bytes(p, bytes.size());
    for (uint64_t i = h & vocab.mask_;; i = (i + 1) & vocab.mask_) {
      Slot& slot = vocab.slots_[i];
      if (slot.rank == kNoRank) {
        slot = Slot{static_cast<uint32_t>(h >> 40), static_cast<Rank>(r)};
        break;
      }
      if (vocab.bytes(static_cast<int32_t>(slot.rank)) == bytes) {
        base::fail(source, ": token bytes of rank ", r, " repeat those of rank ", slot.rank);
      }
    }
  }
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = static_cast<uint8_t>(b);
    vocab.byte_ranks_[b] = vocab.find(&byte, 1);
    if (vocab.byte_ranks_[b] == kNoRank) {
      base::fail(source, ": vocabulary has no token for the single byte ", b,
                 ", so some text could not be encoded");
    }
  }
  return vocab;
}

Vocab Vocab::load_tiktoken_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) base::fail("cannot open vocabulary file ", path);
  std::vector<std::string> tokens;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos) {
      base::fail("file ", path, ": line ", line_no, " is not `base64 rank`");
    }
    auto bytes = base64_decode(std::string_view(line).substr(0, space));
    const char* rank_begin = line.data() + space + 1;
    const char* rank_end = line.data() + line.size();
    uint32_t rank = 0;
    const auto [ptr, ec] = std::from_chars(rank_begin, rank_end, rank);
    if (!bytes || bytes->empty() || ec != std::errc() || ptr != rank_end || rank >= (1u << 30)) {
      base::fail("file ", path, ": line ", line_no, " is not `base64 rank`");
    }
    if (rank >= tokens.size()) tokens.resize(rank + 1);
    if (!tokens[rank].empty()) base::fail("file ", path, ": rank ", rank, " appears twice");
    tokens[rank] = std::move(*bytes);
  }
  if (tokens.empty()) base::fail("file ", path, ": no tokens");
  return from_tokens(std::move(tokens), "file " + path);
}

Rank Vocab::find(const uint8_t* bytes, size_t n_bytes) const {
  const uint64_t h = hash_bytes(bytes, n_bytes);
  const uint32_t tag = static_cast<uint32_t>(h >> 40);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.rank == kNoRank) return kNoRank;
    if (slot.tag != tag) continue;
    const uint32_t begin = offsets_[slot.rank];
    if (offsets_[slot.rank + 1] - begin == n_bytes &&
        std::memcmp(arena_.data() + begin, bytes, n_bytes) == 0) {
      return slot.rank;
    }
  }
}

bool Vocab::has(int32_t rank) const {
  return rank >= 0 && rank < size() && offsets_[rank + 1] > offsets_[rank];
}

}  // namespace deltafin::tokenizer
