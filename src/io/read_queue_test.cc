// Tests for both ReadQueue implementations: exact bytes for unaligned spans, completions matched
// by tag whatever their order, the depth bound, EOF and I/O errors with file and offset, request
// validation, buffered files, and the DELTAFIN_IO override.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "base/error.h"
#include "io/direct_file.h"
#include "io/huge_buffer.h"
#include "io/read_queue.h"
#include "io/test_files.h"

namespace deltafin::io {
namespace {

using testing::first_mismatch;
using testing::scratch_dir;
using testing::write_pattern_file;

std::unique_ptr<ReadQueue> make(const std::string& kind, int depth) {
  if (kind == "pread") return make_pread_queue(depth);
  std::string why_not;
  auto q = make_uring_queue(depth, &why_not);
  if (!q) std::printf("io_uring unavailable: %s\n", why_not.c_str());
  return q;
}

class Queue : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<ReadQueue> queue(int depth) {
    auto q = make(GetParam(), depth);
    if (q) {
      EXPECT_EQ(q->name(), GetParam() == "pread" ? std::string("pread") : "io_uring");
    }
    return q;
  }
};

// Every completion, keyed by tag; fails on a duplicate.
std::map<uint64_t, ReadCompletion> drain(ReadQueue& q) {
  std::map<uint64_t, ReadCompletion> out;
  ReadCompletion c;
  while (q.wait(&c)) {
    EXPECT_TRUE(out.emplace(c.user_tag, c).second) << "tag " << c.user_tag << " came back twice";
  }
  EXPECT_EQ(q.in_flight(), 0);
  return out;
}

TEST_P(Queue, UnalignedSpansInOneQueueReturnExactBytes) {
  for (bool direct : {true, false}) {
    const uint64_t size = 5 * 1048576 + 321;
    const std::string path = write_pattern_file(scratch_dir(), "queue.bin", size);
    const DirectFile file = DirectFile::open(path, direct);
    auto q = queue(4);
    if (!q) GTEST_SKIP();
    constexpr int kReads = 64;
    constexpr size_t kSlot = 2 << 20;
    HugeBuffer buf(kSlot * kReads);
    std::mt19937_64 rng(11);
    std::vector<std::pair<uint64_t, size_t>> spans;
    for (int i = 0; i < kReads; ++i) {
      const uint64_t off = i == 0 ? size - 100 : rng() % (size - 1);
      const size_t len = i == 0 ? 100 : 1 + rng() % std::min<uint64_t>(kSlot - 8192, size - off);
      spans.emplace_back(off, len);
      const AlignedSpan a = align_span(off, len);
      ReadRequest r{&file,
                    a.read_offset,
                    a.read_length,
                    buf.data() + i * kSlot,
                    static_cast<uint64_t>(i),
                    a.required_bytes};
      q->submit(r);
      ASSERT_LE(q->in_flight(), 4);
    }
    const auto done = drain(*q);
    ASSERT_EQ(done.size(), size_t{kReads});
    for (int i = 0; i < kReads; ++i) {
      const ReadCompletion& c = done.at(i);
      ASSERT_TRUE(c.ok()) << c.message;
      const auto [off, len] = spans[i];
      const AlignedSpan a = align_span(off, len);
      ASSERT_GE(c.bytes, a.required_bytes);
      EXPECT_EQ(first_mismatch(buf.data() + i * kSlot + a.data_offset, off, len), -1)
          << (direct ? "direct" : "buffered") << " span " << off << "+" << len;
    }
  }
}

// A long read submitted first and short ones after: completions may come back in any order, and
// each must carry its own tag and land in its own buffer.
TEST_P(Queue, CompletionsMatchTheirRequestsInAnyOrder) {
  const uint64_t size = 32 << 20;
  const std::string path = write_pattern_file(scratch_dir(), "order.bin", size);
  drop_page_cache(path);
  const DirectFile file = DirectFile::open(path);
  auto q = queue(8);
  if (!q) GTEST_SKIP();
  HugeBuffer big(size);
  HugeBuffer small(7 * 4096);
  q->submit({&file, 0, size, big.data(), 1000, 0});
  for (uint64_t i = 0; i < 7; ++i) {
    q->submit({&file, (i + 1) * 65536, 4096, small.data() + i * 4096, i, 0});
  }
  std::vector<uint64_t> order;
  ReadCompletion c;
  while (q->wait(&c)) {
    ASSERT_TRUE(c.ok()) << c.message;
    order.push_back(c.user_tag);
    if (c.user_tag == 1000) {
      ASSERT_EQ(c.bytes, size);
      EXPECT_EQ(first_mismatch(big.data(), 0, size), -1);
    } else {
      ASSERT_EQ(c.bytes, 4096u);
      EXPECT_EQ(first_mismatch(small.data() + c.user_tag * 4096, (c.user_tag + 1) * 65536, 4096),
                -1);
    }
  }
  EXPECT_EQ(std::set<uint64_t>(order.begin(), order.end()).size(), 8u);
  std::printf("completion order:");
  for (uint64_t t : order) std::printf(" %llu", static_cast<unsigned long long>(t));
  std::printf("\n");
}

TEST_P(Queue, NeverMoreThanDepthInFlight) {
  const std::string path = write_pattern_file(scratch_dir(), "depth.bin", 8 << 20);
  const DirectFile file = DirectFile::open(path);
  auto q = queue(3);
  if (!q) GTEST_SKIP();
  HugeBuffer buf(40 * 65536);
  for (uint64_t i = 0; i < 40; ++i) {
    q->submit({&file, i * 65536, 65536, buf.data() + i * 65536, i, 0});
    ASSERT_LE(q->in_flight(), 3);
  }
  const auto done = drain(*q);
  EXPECT_EQ(done.size(), 40u);
  EXPECT_LE(q->max_in_flight(), 3);
  EXPECT_GE(q->max_in_flight(), 1);
  // io_uring reaps only when full, so it must have reached the bound exactly.
  if (GetParam() == "uring") {
    EXPECT_EQ(q->max_in_flight(), 3);
  }
  for (const auto& [tag, c] : done) {
    ASSERT_TRUE(c.ok()) << c.message;
    EXPECT_EQ(first_mismatch(buf.data() + tag * 65536, tag * 65536, 65536), -1);
  }
}

TEST_P(Queue, EndOfFileBeforeRequiredBytesIsAnError) {
  const std::string path = write_pattern_file(scratch_dir(), "eof.bin", 10000);
  const DirectFile file = DirectFile::open(path);
  auto q = queue(2);
  if (!q) GTEST_SKIP();
  HugeBuffer buf(1 << 20);
  // [8192, 12288) holds 1808 bytes of file: enough for 1000, not for 2000, nothing at 16384.
  q->submit({&file, 8192, 4096, buf.data(), 1, 1000});
  q->submit({&file, 8192, 4096, buf.data() + 65536, 2, 2000});
  q->submit({&file, 16384, 4096, buf.data() + 131072, 3, 0});
  const auto done = drain(*q);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_TRUE(done.at(1).ok()) << done.at(1).message;
  EXPECT_EQ(done.at(1).bytes, 1808u);
  EXPECT_EQ(first_mismatch(buf.data(), 8192, 1808), -1);
  for (uint64_t tag : {2, 3}) {
    const ReadCompletion& c = done.at(tag);
    EXPECT_EQ(c.error, ENODATA);
    EXPECT_NE(c.message.find(path), std::string::npos) << c.message;
    EXPECT_NE(c.message.find("ends at byte 10000"), std::string::npos) << c.message;
  }
  EXPECT_NE(done.at(3).message.find("from offset 16384"), std::string::npos) << done.at(3).message;
}

// /proc/self/mem is a regular file whose unmapped addresses fail with EIO: a real I/O error.
TEST_P(Queue, IoErrorComesBackWithFileAndOffset) {
  const DirectFile file = DirectFile::open("/proc/self/mem");
  auto q = queue(2);
  if (!q) GTEST_SKIP();
  HugeBuffer buf(1 << 20);
  q->submit({&file, 4096, 4096, buf.data(), 9, 0});
  const auto done = drain(*q);
  const ReadCompletion& c = done.at(9);
  EXPECT_EQ(c.error, EIO) << c.message;
  EXPECT_NE(c.message.find("/proc/self/mem at offset 4096"), std::string::npos) << c.message;
}

TEST_P(Queue, InvalidRequestsCompleteWithAnErrorInsteadOfBeingIssued) {
  const std::string path = write_pattern_file(scratch_dir(), "invalid.bin", 1 << 20);
  const DirectFile file = DirectFile::open(path);
  if (file.mode() != ReadMode::kDirect) GTEST_SKIP() << "the build tree refuses O_DIRECT";
  auto q = queue(2);
  if (!q) GTEST_SKIP();
  HugeBuffer buf(1 << 20);
  q->submit({&file, 100, 4096, buf.data(), 1, 0});      // offset not aligned
  q->submit({&file, 0, 4096, buf.data() + 512, 2, 0});  // buffer not aligned
  q->submit({nullptr, 0, 4096, buf.data(), 3, 0});      // no file
  q->submit({&file, 0, 4096, buf.data(), 4, 8192});     // requires more than it reads
  q->submit({&file, 0, 0, nullptr, 5, 0});              // empty: fine
  const auto done = drain(*q);
  ASSERT_EQ(done.size(), 5u);
  for (uint64_t tag : {1, 2, 3, 4}) EXPECT_EQ(done.at(tag).error, EINVAL) << tag;
  EXPECT_NE(done.at(1).message.find("not aligned"), std::string::npos) << done.at(1).message;
  EXPECT_TRUE(done.at(5).ok());
  EXPECT_EQ(q->max_in_flight(), 1);  // only the empty read was issued
}

TEST_P(Queue, PollDoesNotBlockAndEventuallyReturnsEverything) {
  const std::string path = write_pattern_file(scratch_dir(), "poll.bin", 1 << 20);
  const DirectFile file = DirectFile::open(path);
  auto q = queue(4);
  if (!q) GTEST_SKIP();
  ReadCompletion c;
  EXPECT_FALSE(q->poll(&c));
  EXPECT_FALSE(q->wait(&c));  // nothing in flight: returns at once
  HugeBuffer buf(1 << 20);
  for (uint64_t i = 0; i < 4; ++i)
    q->submit({&file, i * 65536, 65536, buf.data() + i * 65536, i, 0});
  std::set<uint64_t> seen;
  while (seen.size() < 4) {
    if (q->poll(&c)) {
      ASSERT_TRUE(c.ok()) << c.message;
      seen.insert(c.user_tag);
    }
  }
  EXPECT_FALSE(q->poll(&c));
  EXPECT_EQ(q->in_flight(), 0);
}

TEST_P(Queue, WakeEndsAWaitWhileAReadIsStillInFlight) {
  // pread() cannot read a pipe (ESPIPE), and nothing else keeps a pread in flight on demand.
  if (GetParam() == std::string("pread")) GTEST_SKIP() << "needs a read that blocks: io_uring only";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const DirectFile pipe_end = DirectFile::adopt(fds[0], "test pipe");
  auto q = queue(2);
  if (!q) {
    close(fds[1]);
    GTEST_SKIP();
  }
  std::vector<char> buf(4096);
  q->submit({&pipe_end, 0, buf.size(), buf.data(), 7, 0});  // stays in flight: nobody writes
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    q->wake();
  });
  ReadCompletion c;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(q->wait(&c));  // returned for the wake, not for a completion
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  waker.join();
  EXPECT_EQ(q->in_flight(), 1);
  const std::string data(buf.size(), 'x');
  ASSERT_EQ(write(fds[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_TRUE(q->wait(&c));
  EXPECT_TRUE(c.ok()) << c.message;
  EXPECT_EQ(c.user_tag, 7u);
  EXPECT_EQ(std::string(buf.begin(), buf.end()), data);
  close(fds[1]);
}

INSTANTIATE_TEST_SUITE_P(Impl, Queue, ::testing::Values("uring", "pread"),
                         [](const auto& param_info) { return param_info.param; });

TEST(MakeReadQueue, EnvironmentForcesTheImplementation) {
  const char* old = std::getenv("DELTAFIN_IO");
  const std::string saved = old != nullptr ? old : "";
  setenv("DELTAFIN_IO", "pread", 1);
  EXPECT_STREQ(make_read_queue(2)->name(), "pread");
  setenv("DELTAFIN_IO", "bogus", 1);
  EXPECT_THROW(make_read_queue(2), base::Error);
  std::string why_not;
  const bool uring_works = make_uring_queue(2, &why_not) != nullptr;
  setenv("DELTAFIN_IO", "uring", 1);
  if (uring_works) {
    EXPECT_STREQ(make_read_queue(2)->name(), "io_uring");
  } else {
    EXPECT_THROW(make_read_queue(2), base::Error);
  }
  unsetenv("DELTAFIN_IO");
  EXPECT_STREQ(make_read_queue(2)->name(), uring_works ? "io_uring" : "pread");
  EXPECT_STREQ(make_read_queue(2, QueueKind::kPread)->name(), "pread");
  if (!saved.empty()) setenv("DELTAFIN_IO", saved.c_str(), 1);
}

}  // namespace
}  // namespace deltafin::io
