// will_need_row is advice only: on a file mapping that is not in memory and on ordinary memory,
// in every dtype, the row decoded afterwards is the row decoded without it.
#include "kernels/weight_matrix.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace deltafin::kernels {
namespace {

std::vector<float> decoded(const WeightMatrix& w, int64_t r) {
  std::vector<float> out(static_cast<size_t>(w.cols));
  decode_row(w, r, out.data());
  return out;
}

TEST(WillNeedRow, ChangesNoValueOnAFileMappingOrOnMemory) {
  constexpr int64_t kRows = 300, kCols = 1000;         // rows straddle 4 KiB pages
  std::vector<uint8_t> bytes(kRows * kCols * 4 + 64);  // room for the 4-byte offset below
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 37 + 11) % 251);
  for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] &= 0x3f;  // finite BF16 and F32 values
  const std::string path = ::testing::TempDir() + "will_need_row.bin";
  {
    const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    fsync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // so the advice has pages to read
    close(fd);
  }
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  void* map = mmap(nullptr, bytes.size(), PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  const auto* mapped = static_cast<const uint8_t*>(map);
  for (WeightDType dtype : {WeightDType::kBF16, WeightDType::kF32}) {
    const WeightMatrix in_memory{dtype, bytes.data() + 4, nullptr, kRows, kCols};
    const WeightMatrix in_file{dtype, mapped + 4, nullptr, kRows, kCols};
    for (int64_t r : {int64_t{0}, int64_t{1}, int64_t{150}, kRows - 1}) {
      const std::vector<float> want = decoded(in_memory, r);
      will_need_row(in_memory, r);
      will_need_row(in_file, r);
      EXPECT_EQ(decoded(in_memory, r), want) << r;
      EXPECT_EQ(std::memcmp(decoded(in_file, r).data(), want.data(), want.size() * 4), 0) << r;
    }
  }
  munmap(map, bytes.size());
  close(fd);
}

}  // namespace
}  // namespace deltafin::kernels
