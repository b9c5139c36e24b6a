// Tests for PageCacheWarmer: every page of the ranges is in memory afterwards (mincore), starting
// from a file evicted from the page cache, and destruction stops a long warm-up part-way.
#include "io/page_cache_warmer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "io/test_files.h"

namespace deltafin::io {
namespace {

using testing::first_mismatch;
using testing::scratch_dir;
using testing::write_pattern_file;

size_t resident_pages(const uint8_t* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page;
  std::vector<unsigned char> in((end - begin) / page);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(begin), end - begin, in.data()), 0)
      << std::strerror(errno);
  size_t count = 0;
  for (unsigned char c : in) count += c & 1;
  return count;
}

TEST(PageCacheWarmer, BringsEveryPageOfItsRangesIntoMemory) {
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t size = 24 * kMiB;
  const std::string path = write_pattern_file(scratch_dir(), "warmer.bin", size);
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  const auto* data = static_cast<const uint8_t*>(map);
  const size_t pages = size / static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Precondition: the file left the page cache, so what is resident later is the warmer's doing.
  ASSERT_LT(resident_pages(data, size), pages / 4);

  // Unaligned ranges, out of file order, with a chunk smaller than a range.
  const std::vector<PageCacheWarmer::Range> ranges = {{data + 10 * kMiB, 10 * kMiB - 7},
                                                      {data + kMiB + 123, 4 * kMiB}};
  PageCacheWarmer warmer(ranges, kMiB);
  warmer.wait();
  if (!warmer.error().empty())
    GTEST_SKIP() << "kernel without MADV_POPULATE_READ: " << warmer.error();
  EXPECT_TRUE(warmer.done());
  for (const PageCacheWarmer::Range& r : ranges) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t want = (reinterpret_cast<uintptr_t>(r.data) % page + r.size + page - 1) / page;
    EXPECT_EQ(resident_pages(r.data, r.size), want);
    EXPECT_EQ(first_mismatch(r.data, static_cast<uint64_t>(r.data - data), r.size), -1);
  }
  EXPECT_GE(warmer.bytes_done(), 14 * kMiB - 7);
  munmap(map, size);
  close(fd);
}

// 4 GiB of an anonymous read-only mapping in 4 KiB chunks is about a million calls (seconds), far
// more than the time between construction and stop(); stop() must not wait for them all. (The
// destructor is stop().)
TEST(PageCacheWarmer, StopEndsAWarmUpPartWay) {
  const size_t size = size_t{4} << 30;
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  PageCacheWarmer warmer({{static_cast<const uint8_t*>(map), size}}, 4096);
  // Started (a loaded 2-core machine can take a while to schedule the thread), then stopped.
  for (int i = 0; i < 10000 && warmer.bytes_done() == 0; ++i) usleep(1000);
  warmer.stop();
  EXPECT_TRUE(warmer.done());
  EXPECT_GT(warmer.bytes_done(), 0u);
  EXPECT_LT(warmer.bytes_done(), size);
  warmer.stop();  // a second stop is harmless
  munmap(map, size);
}

}  // namespace
}  // namespace deltafin::io
