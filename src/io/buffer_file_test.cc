// Tests for HugeBuffer (alignment, THP advice) and DirectFile (alignment arithmetic, unaligned
// spans, buffered fallback, page-cache eviction).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "io/direct_file.h"
#include "io/huge_buffer.h"
#include "io/test_files.h"

namespace deltafin::io {
namespace {

using testing::first_mismatch;
using testing::scratch_dir;
using testing::write_pattern_file;

TEST(HugeBuffer, AlignedRoundedUpZeroedAndWritable) {
  HugeBuffer b(3 << 20);
  ASSERT_EQ(b.size(), size_t{4} << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePageBytes, 0u);
  for (size_t i = 0; i < b.size(); i += 4096) ASSERT_EQ(b.data()[i], 0);
  std::memset(b.data(), 0xab, b.size());
  EXPECT_EQ(b.data()[b.size() - 1], 0xab);
}

// Large buffers are faulted by several threads in 2 MiB-aligned chunks: every page of an odd-sized
// buffer must be resident (no chunk missed at the seams or the tail) before anything touches it.
TEST(HugeBuffer, LargeBufferIsResidentEverywhereBeforeUse) {
  HugeBuffer b((size_t{700} << 20) + 12345);
  ASSERT_EQ(b.size(), size_t{702} << 20);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident(b.size() / page);
  ASSERT_EQ(mincore(b.data(), b.size(), resident.data()), 0) << std::strerror(errno);
  size_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) == 0;
  EXPECT_EQ(missing, 0u);
  for (size_t i = 0; i < b.size(); i += 4096) ASSERT_EQ(b.data()[i], 0);
}

TEST(HugeBuffer, MovesOwnership) {
  HugeBuffer a(1);
  uint8_t* p = a.data();
  HugeBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  a = std::move(b);
  EXPECT_EQ(a.data(), p);
  EXPECT_TRUE(HugeBuffer().empty());
}

TEST(HugeBuffer, ReportsWhetherHugePagesBackIt) {
  const std::string mode = thp_mode();
  ASSERT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unavailable")
      << mode;
  HugeBuffer small(8 << 20, PageKind::kSmall);
  EXPECT_EQ(small.pages(), PageKind::kSmall);
  EXPECT_EQ(small.huge_backed_bytes(), 0u);
  HugeBuffer huge(8 << 20, PageKind::kHuge);
  // Two buffers side by side must not be counted together (each has its own mapping).
  HugeBuffer huge2(8 << 20, PageKind::kHuge);
  if (mode == "always" || mode == "madvise") {
    EXPECT_GT(huge.huge_backed_bytes(), 0u) << "THP is " << mode << " but nothing is huge-backed";
  }
  EXPECT_LE(huge.huge_backed_bytes(), huge.size());
  EXPECT_LE(huge2.huge_backed_bytes(), huge2.size());
}

TEST(AlignSpan, CoversTheSpan) {
  AlignedSpan s = align_span(0, 4096);
  EXPECT_EQ(s.read_offset, 0u);
  EXPECT_EQ(s.read_length, 4096u);
  EXPECT_EQ(s.data_offset, 0u);
  s = align_span(5000, 100);
  EXPECT_EQ(s.read_offset, 4096u);
  EXPECT_EQ(s.data_offset, 904u);
  EXPECT_EQ(s.read_length, 4096u);
  EXPECT_EQ(s.required_bytes, 1004u);
  s = align_span(4095, 2);  // straddles a block boundary
  EXPECT_EQ(s.read_offset, 0u);
  EXPECT_EQ(s.read_length, 8192u);
  s = align_span(123456789, 17547264);  // a K3 expert at an odd place: one more block
  EXPECT_EQ(s.read_offset % 4096, 0u);
  EXPECT_EQ(s.read_length, 17547264u + 4096);
  EXPECT_EQ(s.read_offset + s.data_offset, 123456789u);
}

class ReadSpan : public ::testing::TestWithParam<bool> {};  // param: allow O_DIRECT

TEST_P(ReadSpan, UnalignedSpansReturnExactlyTheirBytes) {
  const uint64_t size = 3 * 1048576 + 1234;  // not a multiple of 4096: the last block is short
  const std::string path = write_pattern_file(scratch_dir(), "span.bin", size);
  const DirectFile file = DirectFile::open(path, GetParam());
  if (!GetParam()) {
    EXPECT_EQ(file.mode(), ReadMode::kBuffered);
  }
  EXPECT_EQ(file.size_bytes(), size);
  HugeBuffer buf(size + 8192);
  std::mt19937_64 rng(7);
  std::vector<std::pair<uint64_t, size_t>> spans = {
      {0, 1},    {0, size},    {1, size - 1},      {size - 1, 1},
      {4095, 2}, {4096, 4096}, {size - 1234, 1234}};
  for (int i = 0; i < 200; ++i) {
    const uint64_t off = rng() % size;
    spans.emplace_back(off, 1 + rng() % (size - off));
  }
  for (auto [off, len] : spans) {
    std::memset(buf.data(), 0, buf.size());
    const size_t at = read_span(file, off, len, buf.data(), buf.size());
    ASSERT_EQ(at, off % 4096);
    ASSERT_EQ(first_mismatch(buf.data() + at, off, len), -1) << "span " << off << "+" << len;
  }
}

TEST_P(ReadSpan, SpanPastTheEndIsAnErrorNamingTheFile) {
  const std::string path = write_pattern_file(scratch_dir(), "short.bin", 10000);
  const DirectFile file = DirectFile::open(path, GetParam());
  HugeBuffer buf(1 << 20);
  try {
    read_span(file, 9000, 2000, buf.data(), buf.size());
    FAIL() << "no error";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ends at byte 10000"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ReadSpan, ::testing::Values(true, false),
                         [](const auto& param_info) {
                           return param_info.param ? "Direct" : "Buffered";
                         });

TEST(DirectFile, MissingFileIsAnError) {
  EXPECT_THROW(DirectFile::open(scratch_dir() + "/does-not-exist"), base::Error);
}

// /dev/shm is tmpfs: older kernels refuse O_DIRECT there (buffered fallback), 6.6+ accept it.
// Either way reads must return the right bytes.
TEST(DirectFile, TmpfsReadsCorrectlyInWhicheverModeItAllows) {
  const std::string path = write_pattern_file("/dev/shm", "deltafin-io-test.bin", 100000);
  {
    const DirectFile file = DirectFile::open(path);
    HugeBuffer buf(1 << 20);
    const size_t at = read_span(file, 777, 50000, buf.data(), buf.size());
    EXPECT_EQ(first_mismatch(buf.data() + at, 777, 50000), -1);
    std::printf("tmpfs mode: %s\n", read_mode_name(file.mode()));
  }
  unlink(path.c_str());
}

// A real read per open would wait behind the device's queue on every expert read from a placed
// copy (one file each): once O_DIRECT has worked on a filesystem, later opens there skip the probe.
TEST(DirectFile, ProbesODirectOncePerFilesystem) {
  const std::string a = write_pattern_file(scratch_dir(), "probe-a.bin", 8192);
  const std::string b = write_pattern_file(scratch_dir(), "probe-b.bin", 8192);
  const DirectFile first = DirectFile::open(a);
  if (first.mode() != ReadMode::kDirect) GTEST_SKIP() << "no O_DIRECT on " << scratch_dir();
  const uint64_t probes = direct_probe_count();
  for (int i = 0; i < 3; ++i) {
    const DirectFile again = DirectFile::open(i % 2 ? a : b);
    EXPECT_EQ(again.mode(), ReadMode::kDirect);
    HugeBuffer buf(1 << 20);
    const size_t at = read_span(again, 100, 5000, buf.data(), buf.size());
    EXPECT_EQ(first_mismatch(buf.data() + at, 100, 5000), -1);
  }
  EXPECT_EQ(direct_probe_count(), probes);
  EXPECT_EQ(DirectFile::open(a, false).mode(), ReadMode::kBuffered);
}

// Resident pages of a file, from mincore on a mapping of it.
size_t resident_pages(const std::string& path, size_t size) {
  const DirectFile f = DirectFile::open(path, false);
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, f.fd(), 0);
  EXPECT_NE(map, MAP_FAILED);
  std::vector<unsigned char> vec((size + 4095) / 4096);
  EXPECT_EQ(mincore(map, size, vec.data()), 0);
  munmap(map, size);
  size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

TEST(DirectFile, BufferedReadsAndDropPageCacheLeaveNothingCached) {
  const size_t size = 4 << 20;
  const std::string path = write_pattern_file(scratch_dir(), "cache.bin", size);
  drop_page_cache(path);
  EXPECT_EQ(resident_pages(path, size), 0u);
  const DirectFile file = DirectFile::open(path, false);
  HugeBuffer buf(size);
  read_span(file, 0, size, buf.data(), buf.size());
  EXPECT_EQ(resident_pages(path, size), 0u) << "buffered reads must not leave experts cached";
}

}  // namespace
}  // namespace deltafin::io
