// The read scheduler against real files and pipes: every job completes once or is dropped,
// queued jobs start while others are in flight, shutdown, and jobs read in pieces: every byte
// placed, a short end of file, a more urgent job overtaking at the next piece, and a cancel that
// stops a job there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "io/huge_buffer.h"
#include "io/read_scheduler.h"
#include "io/test_files.h"

namespace deltafin::io {
namespace {

std::string scratch() { return std::string(DELTAFIN_BINARY_DIR) + "/io_test_tmp"; }

// Collects one job's completion and lets the test wait for it.
struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  ReadCompletion completion;

  std::function<void(const ReadCompletion&)> callback() {
    return [this](const ReadCompletion& c) {
      std::lock_guard<std::mutex> lock(mu);
      ++calls;
      completion = c;
      cv.notify_all();
    };
  }
  bool wait(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, timeout, [&] { return calls > 0; });
  }
  bool done() {
    std::lock_guard<std::mutex> lock(mu);
    return calls > 0;
  }
};

// Waits until the scheduler has issued `n` requests to the device in all (a read held on a pipe
// stays in flight once issued).
void wait_issued(const ReadScheduler& s, uint64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.stats().requests < n) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "only " << s.stats().requests << " of " << n << " requests issued";
    std::this_thread::yield();
  }
}

// A pipe a piece can be held in flight on: a read of it waits until the test writes. pread()
// cannot read a pipe, so these tests need io_uring.
struct HeldPipe {
  int fds[2] = {-1, -1};
  DirectFile read_end;
  HeldPipe() {
    if (pipe(fds) != 0) throw base::Error("pipe failed");
    read_end = DirectFile::adopt(fds[0], "test pipe");
  }
  ~HeldPipe() { close(fds[1]); }
  void write_bytes(size_t n) {
    const std::string data(n, 'p');
    ASSERT_EQ(write(fds[1], data.data(), n), static_cast<ssize_t>(n));
  }
};

// An io_uring scheduler, or nullptr with *why set where io_uring cannot start (the test skips).
std::unique_ptr<ReadScheduler> uring_scheduler(int depth, std::string* why) {
  try {
    return std::make_unique<ReadScheduler>(depth, QueueKind::kUring);
  } catch (const base::Error& e) {
    *why = e.what();
    return nullptr;
  }
}

// A guess of `pieces` 4 KiB pieces from the pipe into `dest`.
ReadJob pieced_guess(const HeldPipe& p, int pieces, io::HugeBuffer& dest, Outcome& out) {
  ReadJob job{&p.read_end,   0, size_t(pieces) * 4096, 0, dest.data(), ReadPriority::kSpeculative,
              out.callback()};
  job.piece_bytes = 4096;
  return job;
}

TEST(ReadScheduler, EveryJobCompletesOrIsCancelled) {
  const std::string path = io::testing::write_pattern_file(scratch(), "sched.bin", 1 << 20);
  DirectFile f = DirectFile::open(path);
  auto s = std::make_shared<ReadScheduler>(2);
  constexpr int kJobs = 24;
  io::HugeBuffer buf(kJobs * 16384);
  std::atomic<int> done{0};
  std::vector<uint64_t> ids;
  std::vector<std::atomic<int>> calls(kJobs);
  for (int i = 0; i < kJobs; ++i) {
    ReadJob job{&f,     uint64_t(i) * 16384,    16384,
                0,      buf.data() + i * 16384, static_cast<ReadPriority>(i % kReadPriorities),
                nullptr};
    job.done = [&, i](const ReadCompletion& c) {
      EXPECT_TRUE(c.ok()) << c.message;
      EXPECT_EQ(io::testing::first_mismatch(buf.data() + i * 16384, i * 16384, 16384), -1);
      ++calls[i];
      ++done;
    };
    ids.push_back(s->submit(std::move(job)));
  }
  s->promote(ids.back(), ReadPriority::kNow);
  int cancelled = 0;
  for (int i = kJobs - 4; i < kJobs; ++i) cancelled += s->cancel(ids[i]) == CancelResult::kDropped;
  while (done.load() + cancelled < kJobs) std::this_thread::yield();
  s.reset();  // joins the I/O thread
  for (int i = 0; i < kJobs; ++i) EXPECT_LE(calls[i].load(), 1);
  EXPECT_EQ(done.load() + cancelled, kJobs);
}

TEST(ReadScheduler, AJobQueuedWhileAReadIsInFlightStartsAtOnce) {
  // A read of an empty pipe stays in flight until the test writes. With depth 2, a job submitted
  // meanwhile must start and finish without waiting for it.
  HeldPipe p;
  const std::string path = io::testing::write_pattern_file(scratch(), "sched3.bin", 1 << 16);
  const DirectFile f = DirectFile::open(path);
  io::HugeBuffer buf(1 << 16), held(4096);
  std::string why;
  std::unique_ptr<ReadScheduler> s = uring_scheduler(2, &why);
  if (!s) GTEST_SKIP() << why;
  Outcome piped, filed;
  s->submit({&p.read_end, 0, 4096, 0, held.data(), ReadPriority::kSpeculative, piped.callback()});
  wait_issued(*s, 1);  // the pipe read is in flight
  s->submit({&f, 0, 4096, 0, buf.data(), ReadPriority::kNow, filed.callback()});
  ASSERT_TRUE(filed.wait());
  EXPECT_TRUE(filed.completion.ok()) << filed.completion.message;
  EXPECT_FALSE(piped.done());
  p.write_bytes(4096);
  EXPECT_TRUE(piped.wait());
}

TEST(ReadScheduler, ShutdownCancelsQueuedJobs) {
  const std::string path = io::testing::write_pattern_file(scratch(), "sched2.bin", 1 << 22);
  DirectFile f = DirectFile::open(path);
  io::HugeBuffer buf(1 << 22);
  std::atomic<int> ok{0}, cancelled{0};
  {
    ReadScheduler s(1);
    for (int i = 0; i < 64; ++i) {
      s.submit({&f, uint64_t(i % 64) * 65536, 65536, 0, buf.data() + i * 65536,
                ReadPriority::kSpeculative,
                [&](const ReadCompletion& c) { (c.error == ECANCELED ? cancelled : ok)++; }});
    }
  }
  EXPECT_EQ(ok + cancelled, 64);
}

TEST(ReadScheduler, APiecedJobPlacesEveryByteAndCallsBackOnce) {
  // 5 pieces of 12 KiB and a short last one; the span's end is 100 bytes before EOF, so the last
  // piece must come back short without failing.
  constexpr size_t kPiece = 12 * 1024, kRequired = 5 * kPiece + 3000;
  const std::string path =
      io::testing::write_pattern_file(scratch(), "pieces.bin", 8192 + kRequired + 100);
  const DirectFile f = DirectFile::open(path);
  io::HugeBuffer buf(8 * kPiece);
  for (int depth : {1, 3}) {
    auto s = std::make_unique<ReadScheduler>(depth);
    Outcome out;
    ReadJob job{&f, 8192, 6 * kPiece, kRequired, buf.data(), ReadPriority::kNow, out.callback()};
    job.piece_bytes = kPiece;
    const uint64_t id = s->submit(std::move(job));
    ASSERT_TRUE(out.wait());
    EXPECT_TRUE(out.completion.ok()) << out.completion.message;
    EXPECT_EQ(out.completion.user_tag, id);
    EXPECT_EQ(out.completion.bytes, kRequired + 100);
    EXPECT_EQ(io::testing::first_mismatch(buf.data(), 8192, kRequired), -1);
    EXPECT_EQ(s->stats().requests, 6u);
    EXPECT_EQ(s->stats().bytes[0], kRequired + 100);
    EXPECT_EQ(s->cancel(id), CancelResult::kTooLate);
    s.reset();  // joins the I/O thread: a second callback would have run by now
    EXPECT_EQ(out.calls, 1);
  }
}

TEST(ReadScheduler, AMoreUrgentJobOvertakesAPiecedOneAtItsNextPiece) {
  HeldPipe p;
  const std::string path = io::testing::write_pattern_file(scratch(), "overtake.bin", 1 << 16);
  const DirectFile f = DirectFile::open(path);
  io::HugeBuffer buf(1 << 16), guess(4 * 4096);
  std::string why;
  std::unique_ptr<ReadScheduler> s = uring_scheduler(1, &why);
  if (!s) GTEST_SKIP() << why;
  Outcome guessed, demanded;
  ReadJob g = pieced_guess(p, 4, guess, guessed);
  s->submit(std::move(g));
  wait_issued(*s, 1);  // its first piece is in flight
  s->submit({&f, 0, 8192, 0, buf.data(), ReadPriority::kNow, demanded.callback()});
  p.write_bytes(4096);  // the first piece lands; the lane must go to the demand next
  ASSERT_TRUE(demanded.wait());
  EXPECT_TRUE(demanded.completion.ok()) << demanded.completion.message;
  EXPECT_FALSE(guessed.done());
  p.write_bytes(3 * 4096);
  ASSERT_TRUE(guessed.wait());
  EXPECT_TRUE(guessed.completion.ok()) << guessed.completion.message;
  EXPECT_EQ(guessed.completion.bytes, 4u * 4096);
  EXPECT_EQ(s->stats().requests, 5u);
}

TEST(ReadScheduler, CancelStopsAPiecedJobAfterThePiecesInFlight) {
  HeldPipe p;
  io::HugeBuffer guess(8 * 4096);
  std::string why;
  std::unique_ptr<ReadScheduler> s = uring_scheduler(2, &why);
  if (!s) GTEST_SKIP() << why;
  Outcome out;
  ReadJob g = pieced_guess(p, 8, guess, out);
  const uint64_t id = s->submit(std::move(g));
  wait_issued(*s, 2);  // two pieces are in flight
  EXPECT_EQ(s->cancel(id), CancelResult::kStopping);
  EXPECT_EQ(s->cancel(id), CancelResult::kStopping);  // asking again changes nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(out.done());  // not before its pieces in flight land
  p.write_bytes(8 * 4096);
  ASSERT_TRUE(out.wait());
  EXPECT_EQ(out.completion.error, ECANCELED);
  EXPECT_EQ(out.completion.bytes, 2u * 4096);
  EXPECT_EQ(s->stats().requests, 2u);
  EXPECT_EQ(s->cancel(id), CancelResult::kTooLate);  // finished
}

TEST(ReadScheduler, CancelBeforeAnyPieceDropsTheJob) {
  HeldPipe p;
  const std::string path = io::testing::write_pattern_file(scratch(), "drop.bin", 1 << 16);
  const DirectFile f = DirectFile::open(path);
  io::HugeBuffer buf(1 << 16), held(4096);
  std::string why;
  std::unique_ptr<ReadScheduler> s = uring_scheduler(1, &why);
  if (!s) GTEST_SKIP() << why;
  Outcome holder, dropped;
  s->submit({&p.read_end, 0, 4096, 0, held.data(), ReadPriority::kNow, holder.callback()});
  wait_issued(*s, 1);  // the pipe read holds the only lane
  ReadJob g{&f, 0, 1 << 16, 0, buf.data(), ReadPriority::kSpeculative, dropped.callback()};
  g.piece_bytes = 4096;
  const uint64_t id = s->submit(std::move(g));
  EXPECT_EQ(s->cancel(id), CancelResult::kDropped);
  p.write_bytes(4096);
  ASSERT_TRUE(holder.wait());
  s.reset();
  EXPECT_FALSE(dropped.done());
}

TEST(ReadScheduler, ShutdownWaitsForAPiecedJobInFlightAndCallsItBack) {
  HeldPipe p;
  io::HugeBuffer guess(4 * 4096);
  std::string why;
  std::unique_ptr<ReadScheduler> s = uring_scheduler(1, &why);
  if (!s) GTEST_SKIP() << why;
  Outcome out;
  ReadJob g = pieced_guess(p, 4, guess, out);
  s->submit(std::move(g));
  wait_issued(*s, 1);  // its first piece is in flight
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    p.write_bytes(4 * 4096);
  });
  s.reset();  // waits for the first piece, issues no more
  writer.join();
  EXPECT_EQ(out.calls, 1);
  EXPECT_EQ(out.completion.error, ECANCELED);
  EXPECT_EQ(out.completion.bytes, 4096u);
}

}  // namespace
}  // namespace deltafin::io
