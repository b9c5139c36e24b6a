// For tests of the text API on a tiny model: a folder holding a fixture's files (linked) and a
// byte-level tokenizer with K3's chat special tokens, 256 byte tokens + 256 reserved ids = the
// vocabulary of k3-tiny-a and kimi-linear-tiny, with <|end_of_msg|> at 501, their eos.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace deltafin::testing {

inline std::string base64(const std::string& bytes) {
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    for (size_t k = 0; k < 4; ++k)
      out += k <= bytes.size() - i ? kDigits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// Makes `dir` (replacing what was there) from tests/fixtures/`fixture` and returns it.
inline std::string make_text_model(const std::string& source_dir, const std::string& fixture_name,
                                   const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path fixture = fs::path(source_dir) / "tests/fixtures" / fixture_name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const fs::directory_entry& e : fs::directory_iterator(fixture))
    fs::create_symlink(e.path(), fs::path(dir) / e.path().filename());
  std::ofstream vocab(fs::path(dir) / "tiktoken.model", std::ios::binary);
  for (int b = 0; b < 256; ++b)
    vocab << base64(std::string(1, static_cast<char>(b))) << ' ' << b << '\n';
  std::ofstream config(fs::path(dir) / "tokenizer_config.json", std::ios::binary);
  config << R"({"added_tokens_decoder": {"256": {"content": "[BOS]"}, "257": {"content": "[EOS]"},
    "259": {"content": "<|open|>"}, "260": {"content": "<|close|>"},
    "261": {"content": "<|sep|>"}, "501": {"content": "<|end_of_msg|>"}}})";
  return dir;
}

}  // namespace deltafin::testing
