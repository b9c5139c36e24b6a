// Tests for base: thread pool coverage and determinism, error formatting, ISA selection.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
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
