// DriveTable against a fake clock and fake drives: least-expected-completion dispatch, bandwidth
// learned over windows (not single reads), failed drives avoided, busy-time accounting; the
// ceiling cache file; and the scheduler's per-drive queues with real files.
#include "io/drive.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "base/error.h"
#include "io/huge_buffer.h"
#include "io/read_scheduler.h"
#include "io/test_files.h"

namespace deltafin::io {
namespace {

constexpr uint64_t kExpert = 17'547'264;

struct FakeClock {
  double t = 100;
  DriveTable::Clock fn() {
    return [this] { return t; };
  }
};

TEST(DriveTable, LeastExpectedCompletionSplitsByBandwidth) {
  FakeClock clock;
  DriveTable drives(clock.fn());
  const int slow = drives.add_drive("slow", {0.2, 0.0});
  const int fast = drives.add_drive("fast", {0.8, 0.0});
  int count[2] = {};
  for (int i = 0; i < 50; ++i) {
    const int d = drives.pick({slow, fast}, kExpert);
    ASSERT_GE(d, 0);
    drives.on_queued(d, kExpert);
    ++count[d];
  }
  // 1:4 by bandwidth; round robin would give 25/25.
  EXPECT_NEAR(count[slow], 10, 1);
  EXPECT_NEAR(count[fast], 40, 1);
  EXPECT_EQ(drives.queued_bytes(slow), count[slow] * kExpert);
}

TEST(DriveTable, LatencyBreaksTiesAndListOrderBreaksEqualOnes) {
  FakeClock clock;
  DriveTable drives(clock.fn());
  const int a = drives.add_drive("a", {1.0, 5.0});
  const int b = drives.add_drive("b", {1.0, 1.0});
  const int c = drives.add_drive("c", {1.0, 1.0});
  EXPECT_EQ(drives.pick({a, b, c}, kExpert), b);
  EXPECT_EQ(drives.pick({c, b}, kExpert), c);
  EXPECT_EQ(drives.pick({a}, kExpert), a);
  EXPECT_EQ(drives.pick({}, kExpert), -1);
}

TEST(DriveTable, FailedDriveIsAvoidedAndReportedOnce) {
  FakeClock clock;
  DriveTable drives(clock.fn());
  const int fast = drives.add_drive("fast", {5.0, 0.0});
  const int slow = drives.add_drive("slow", {0.1, 0.0});
  EXPECT_EQ(drives.pick({fast, slow}, kExpert), fast);
  EXPECT_TRUE(drives.mark_failed(fast));
  EXPECT_FALSE(drives.mark_failed(fast));
  EXPECT_TRUE(drives.failed(fast));
  EXPECT_EQ(drives.pick({fast, slow}, kExpert), slow);
  EXPECT_EQ(drives.pick({fast}, kExpert), -1);
}

TEST(DriveTable, BandwidthMovesOnlyAfterAFullWindow) {
  FakeClock clock;
  DriveTable drives(clock.fn());
  const int d = drives.add_drive("d", {1.0, 0.0});
  const uint64_t bytes = 40'000'000;  // in 0.125 s (exact in binary): 0.32 GB/s
  auto one_read = [&] {
    drives.on_queued(d, bytes);
    drives.on_issued(d);
    clock.t += 0.125;
    drives.on_completed(d, bytes, bytes, true);
  };
  one_read();
  one_read();
  EXPECT_DOUBLE_EQ(drives.stats(d).bandwidth_gbps, 1.0);  // 0.25 s of busy time: no sample yet
  one_read();
  EXPECT_NEAR(drives.stats(d).bandwidth_gbps, 0.66, 1e-9);  // half way to 0.32
  clock.t += 5;                                             // idle time is not busy time
  for (int i = 0; i < 3; ++i) one_read();
  EXPECT_NEAR(drives.stats(d).bandwidth_gbps, 0.49, 1e-9);
  const DriveStats s = drives.stats(d);
  EXPECT_EQ(s.bytes, 6 * bytes);
  EXPECT_NEAR(s.busy_seconds, 0.75, 1e-9);
  EXPECT_NEAR(s.achieved_gbps(), 0.32, 1e-9);
  EXPECT_NEAR(s.share_of_ceiling(), 0.32, 1e-9);
  EXPECT_EQ(drives.queued_bytes(d), 0u);
}

TEST(DriveTable, OverlappingRequestsCountBusyTimeOnce) {
  FakeClock clock;
  DriveTable drives(clock.fn());
  const int d = drives.add_drive("d", {1.0, 0.0});
  drives.on_issued(d);
  clock.t += 0.1;
  drives.on_issued(d);
  clock.t += 0.1;
  drives.on_completed(d, 0, 100, true);
  clock.t += 0.1;
  drives.on_completed(d, 0, 100, false);
  EXPECT_NEAR(drives.stats(d).busy_seconds, 0.3, 1e-9);
  EXPECT_EQ(drives.stats(d).errors, 1u);
  EXPECT_EQ(drives.in_flight(d), 0);
}

TEST(DriveCache, StoresAndReplacesPerKey) {
  const std::string dir = testing::scratch_dir() + "/drive_cache";
  std::filesystem::remove_all(dir);
  const std::string file = dir + "/drives.tsv";
  ::setenv("DELTAFIN_DRIVE_CACHE", file.c_str(), 1);
  EXPECT_EQ(drive_cache_path(), file);
  EXPECT_FALSE(cached_ceiling("a|1").has_value());
  store_ceiling("a|1", {1.5, 0.25});
  store_ceiling("b|2", {3.0, 0.5});
  store_ceiling("a|1", {2.5, 0.75});
  ASSERT_TRUE(cached_ceiling("a|1").has_value());
  EXPECT_DOUBLE_EQ(cached_ceiling("a|1")->gbps, 2.5);
  EXPECT_DOUBLE_EQ(cached_ceiling("a|1")->latency_ms, 0.75);
  EXPECT_DOUBLE_EQ(cached_ceiling("b|2")->gbps, 3.0);
  EXPECT_FALSE(cached_ceiling("a").has_value());  // a prefix is not the key
  ::unsetenv("DELTAFIN_DRIVE_CACHE");
}

TEST(DriveIdentity, FilesOfOneFolderAreOneDrive) {
  const std::string dir = testing::scratch_dir() + "/drive_id";
  const std::string f1 = testing::write_pattern_file(dir, "a.bin", 4096);
  const std::string f2 = testing::write_pattern_file(dir, "b.bin", 4096);
  const DriveIdentity id = identify_drive(f1);
  EXPECT_FALSE(id.name.empty());
  EXPECT_FALSE(id.key.empty());
  DriveTable drives;
  EXPECT_EQ(drives.drive_of_path(f1), drives.drive_of_path(f2));
  EXPECT_EQ(drives.size(), 1);
  EXPECT_THROW(drives.drive_of_path(dir + "/missing"), base::Error);
}

// Jobs named for two drives each land on their drive's figures, and the queues empty.
TEST(ReadSchedulerDrives, PerDriveAccounting) {
  const std::string dir = testing::scratch_dir() + "/drive_sched";
  const std::string path = testing::write_pattern_file(dir, "f.bin", 1 << 20);
  DirectFile file = DirectFile::open(path);
  ReadScheduler sched(2, QueueKind::kPread, 2);
  const int a = sched.drives().add_drive("a", {1.0, 0.0});
  const int b = sched.drives().add_drive("b", {1.0, 0.0});
  HugeBuffer buf(size_t{1} << 21);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, ok = 0;
  constexpr int kJobs = 12;
  for (int i = 0; i < kJobs; ++i) {
    ReadJob job;
    job.file = &file;
    job.offset = static_cast<uint64_t>(i % 8) * 65536;
    job.length = 65536;
    job.dest = buf.data() + static_cast<size_t>(i) * 65536;
    job.drive = i % 3 == 0 ? a : b;
    job.done = [&](const ReadCompletion& c) {
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      ok += c.ok();
      cv.notify_all();
    };
    sched.submit(std::move(job));
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return done == kJobs; }));
  }
  EXPECT_EQ(ok, kJobs);
  EXPECT_EQ(sched.drives().stats(a).bytes, 4u * 65536);
  EXPECT_EQ(sched.drives().stats(b).bytes, 8u * 65536);
  EXPECT_EQ(sched.drives().queued_bytes(a), 0u);
  EXPECT_EQ(sched.drives().queued_bytes(b), 0u);
  for (int i = 0; i < kJobs; ++i) {
    EXPECT_EQ(testing::first_mismatch(buf.data() + static_cast<size_t>(i) * 65536,
                                      static_cast<uint64_t>(i % 8) * 65536, 65536),
              -1);
  }
}

// A drive at its depth must not hold back another drive's job: drive "a" reads a pipe (held in
// flight until the test writes; pread cannot read pipes, so io_uring), drive "b" a file.
TEST(ReadSchedulerDrives, ASaturatedDriveDoesNotBlockAnother) {
  std::unique_ptr<ReadScheduler> sched;
  try {
    sched = std::make_unique<ReadScheduler>(1, QueueKind::kUring, 2);
  } catch (const base::Error& e) {
    GTEST_SKIP() << "needs io_uring: " << e.what();
  }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  DirectFile pipe_end = DirectFile::adopt(fds[0], "test pipe");
  const std::string path =
      testing::write_pattern_file(testing::scratch_dir() + "/drive_block", "f.bin", 65536);
  DirectFile file = DirectFile::open(path);
  const int a = sched->drives().add_drive("a", {1.0, 0.0});
  const int b = sched->drives().add_drive("b", {1.0, 0.0});
  HugeBuffer buf(size_t{1} << 21);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  auto job = [&](const DirectFile* f, int drive, int tag) {
    ReadJob j;
    j.file = f;
    j.length = 4096;
    j.dest = buf.data() + static_cast<size_t>(tag) * 4096;
    j.drive = drive;
    j.done = [&, tag](const ReadCompletion&) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(tag);
      cv.notify_all();
    };
    return j;
  };
  sched->submit(job(&pipe_end, a, 0));  // held in flight
  sched->submit(job(&pipe_end, a, 1));  // queued behind it: drive a is at its depth of 1
  sched->submit(job(&file, b, 2));      // must not wait for drive a
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return !order.empty(); }));
    EXPECT_EQ(order, std::vector<int>{2});
  }
  EXPECT_EQ(sched->stats().requests, 2u);  // job 1 not issued while job 0 holds drive a
  EXPECT_EQ(sched->drives().in_flight(a), 1);
  const std::string data(8192, 'p');
  ASSERT_EQ(write(fds[1], data.data(), 4096), 4096);
  ASSERT_EQ(write(fds[1], data.data(), 4096), 4096);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return order.size() == 3; }));
  }
  EXPECT_EQ(order, (std::vector<int>{2, 0, 1}));
  sched.reset();
  close(fds[1]);
}

}  // namespace
}  // namespace deltafin::io
