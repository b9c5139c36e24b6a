// Helpers shared by the format module's tests: temporary folders, safetensors bytes built by hand,
// and header rewrites of a copied checkpoint (the way damaged files are made).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace deltafin::format::testing {

inline std::string fixture_dir() {
  return std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";
}

class TempDir {
 public:
  TempDir() {
    std::string templ =
        (std::filesystem::temp_directory_path() / "deltafin_format_XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A whole safetensors file: length, the given header text (padded with spaces to 8 bytes), data.
inline std::string make_file(std::string header, uint64_t data_bytes, char fill = '\0') {
  while (header.size() % 8) header += ' ';
  return le64(header.size()) + header + std::string(data_bytes, fill);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Copies every file of the fixture checkpoint into `dir`.
inline void copy_fixture(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(fixture_dir())) {
    std::filesystem::copy_file(e.path(), std::filesystem::path(dir) / e.path().filename());
    std::filesystem::permissions(std::filesystem::path(dir) / e.path().filename(),
                                 std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add);
  }
}

// Rewrites the JSON header of a safetensors file in place, keeping its data section as it is.
inline void edit_header(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  edit(header);
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  write_file(path, le64(text.size()) + text + bytes.substr(8 + n));
}

// Runs `fn` and returns the base::Error message it throws (fails the test when it does not throw).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const base::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a base::Error";
  return "";
}

}  // namespace deltafin::format::testing
