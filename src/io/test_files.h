// Test helper: files with known content in a scratch folder of the build tree (a real disk, so
// O_DIRECT and page-cache eviction behave as in production; /tmp may be tmpfs elsewhere).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace deltafin::io::testing {

// Byte i of every test file; not periodic at any power of two, so a misplaced block shows.
inline uint8_t pattern_byte(uint64_t i) {
  return static_cast<uint8_t>((i * 2654435761u >> 7) ^ (i >> 12) ^ (i >> 20));
}

inline std::string write_pattern_file(const std::string& dir, const std::string& name,
                                      uint64_t size_bytes) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::vector<char> bytes(size_bytes);
  for (uint64_t i = 0; i < size_bytes; ++i) bytes[i] = static_cast<char>(pattern_byte(i));
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(size_bytes));
  return path;
}

inline std::string scratch_dir() { return std::string(DELTAFIN_BINARY_DIR) + "/io_test_tmp"; }

// Index of the first byte of [p, p + n) that differs from the pattern starting at `offset`, or -1.
inline int64_t first_mismatch(const uint8_t* p, uint64_t offset, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != pattern_byte(offset + i)) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace deltafin::io::testing
