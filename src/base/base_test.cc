// Tests for base: thread pool coverage and determinism, error formatting, ISA selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/memory_load.h"
#include "base/thread_pool.h"

namespace deltafin::base {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  for (size_t n : {1u, 2u, 7u, 64u, 1000u, 1023u}) {
    for (size_t grain : {1u, 4u, 16u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, grain, [&](size_t b, size_t e) {
        EXPECT_TRUE(b % grain == 0);
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, ManyJobsInARow) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  for (int j = 0; j < 2000; ++j) {
    pool.parallel_for(10, 1, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) sum += static_cast<long>(i);
    });
  }
  EXPECT_EQ(sum.load(), 2000L * 45);
}

TEST(ThreadPool, ActiveThreadsLimitWhichThreadsRunChunks) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.active_threads(), 4);
  for (int active : {1, 2, 3}) {
    ActiveThreads scope(pool, active);
    EXPECT_EQ(pool.active_threads(), active);
    for (size_t n : {5u, 64u, 1001u}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::set<std::thread::id> ran;
      std::atomic<int> chunks{0};
      pool.parallel_for(n, 1, [&](size_t b, size_t e) {
        ++chunks;
        {
          std::lock_guard<std::mutex> lock(mu);
          ran.insert(std::this_thread::get_id());
        }
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_EQ(chunks.load(), active) << "n=" << n;  // one contiguous chunk per active thread
      EXPECT_LE(ran.size(), static_cast<size_t>(active));
    }
  }
  EXPECT_EQ(pool.active_threads(), 4);  // each scope gave the threads back
  pool.set_active_threads(0);
  EXPECT_EQ(pool.active_threads(), 1);
  pool.set_active_threads(99);
  EXPECT_EQ(pool.active_threads(), 4);
}

// A drafter and the target share the pool: two threads posting jobs at once must each get every
// index of their own job exactly once, split into the same chunks as when they run alone.
TEST(ThreadPool, TwoCallersAtOnceEachGetTheirOwnJobWithTheSoloSplit) {
  using Chunks = std::vector<std::pair<size_t, size_t>>;
  constexpr int kCalls = 1000;
  constexpr size_t kGrain = 4;
  const auto job_size = [](int caller, int call) { return 200 + 37 * caller + call % 13; };
  const auto chunks_of = [](ThreadPool& pool, size_t n, const std::function<void(size_t)>& body) {
    std::mutex mu;
    Chunks chunks;
    pool.parallel_for(n, kGrain, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) body(i);
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(b, e);
    });
    std::sort(chunks.begin(), chunks.end());
    return chunks;
  };
  ThreadPool pool(4);
  std::map<size_t, Chunks> solo;  // the split of each job size with one caller
  for (int caller = 0; caller < 2; ++caller) {
    for (int call = 0; call < 13; ++call) {
      const size_t n = job_size(caller, call);
      solo[n] = chunks_of(pool, n, [](size_t) {});
    }
  }

  std::atomic<int> ready{0};
  int wrong_values[2] = {0, 0}, wrong_splits[2] = {0, 0};
  const auto run = [&](int caller) {
    ++ready;
    while (ready.load() < 2) {
    }
    for (int call = 0; call < kCalls; ++call) {
      const size_t n = job_size(caller, call);
      const int tag = caller * kCalls + call + 1;
      std::vector<int> out(n, 0);
      const Chunks chunks = chunks_of(pool, n, [&](size_t i) { out[i] += tag; });
      for (size_t i = 0; i < n; ++i) wrong_values[caller] += out[i] != tag;
      wrong_splits[caller] += chunks != solo.at(n);
    }
  };
  std::thread drafter(run, 1);
  run(0);
  drafter.join();
  for (int caller = 0; caller < 2; ++caller) {
    EXPECT_EQ(wrong_values[caller], 0) << "caller " << caller;
    EXPECT_EQ(wrong_splits[caller], 0) << "caller " << caller;
  }
}

TEST(ThreadPool, ActiveThreadsRestoreEarly) {
  ThreadPool pool(3);
  ActiveThreads scope(pool, 1);
  EXPECT_EQ(pool.active_threads(), 1);
  scope.restore();
  EXPECT_EQ(pool.active_threads(), 3);
}

TEST(MemoryLoad, CopiesUntilStoppedAndReportsItsRate) {
  const size_t bytes = size_t{1} << 20;
  MemoryLoad load(2, bytes);
  EXPECT_EQ(load.threads(), 2);
  while (load.bytes_copied() < 8 * bytes) std::this_thread::yield();
  load.stop();
  const uint64_t copied = load.bytes_copied();
  EXPECT_GE(copied, 8 * bytes);
  EXPECT_GT(load.gbps(), 0.0);
  EXPECT_NEAR(load.gbps(), copied / load.seconds() / 1e9, 1e-9);
  EXPECT_NE(std::memcmp(load.source(0), load.source(1), bytes), 0);
  // Stopped means stopped: nothing more is copied, and a second stop() changes nothing.
  const double seconds = load.seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  load.stop();
  EXPECT_EQ(load.bytes_copied(), copied);
  EXPECT_EQ(load.seconds(), seconds);
}

TEST(MemoryLoad, TheCopyIsReal) {
  const size_t bytes = size_t{1} << 20;
  MemoryLoad load(1, bytes);
  while (load.bytes_copied() < 2 * bytes) std::this_thread::yield();
  load.stop();
  EXPECT_EQ(std::memcmp(load.source(0), load.destination(0), bytes), 0);
}

TEST(Error, MessageConcatenates) {
  try {
    fail("tensor ", "w", " has ", 3, " bytes");
    FAIL() << "fail() returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor w has 3 bytes");
  }
}

TEST(CpuFeatures, SelectedIsaIsSupported) {
  EXPECT_TRUE(isa_supported(selected_isa()));
  EXPECT_TRUE(isa_supported(Isa::kRef));
  if (cpu_features().avx512) {
    EXPECT_TRUE(cpu_features().avx2);
  }
}

}  // namespace
}  // namespace deltafin::base
