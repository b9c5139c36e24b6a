// Tests for the memory budget: size parsing, the budget formula, cgroup v1/v2 discovery on fake
// /proc and /sys trees (nested limits, "max", v1's "unlimited"), and the RSS readers.
#include "base/memory_budget.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/error.h"

namespace deltafin::base {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(ParseByteSize, AcceptsTheUsualForms) {
  EXPECT_EQ(parse_byte_size("24G"), 24 * kGiB);
  EXPECT_EQ(parse_byte_size("512M"), 512 * kMiB);
  EXPECT_EQ(parse_byte_size("1.5G"), 3 * kGiB / 2);
  EXPECT_EQ(parse_byte_size("64GiB"), 64 * kGiB);
  EXPECT_EQ(parse_byte_size("2gb"), 2 * kGiB);
  EXPECT_EQ(parse_byte_size("100k"), 102400u);
  EXPECT_EQ(parse_byte_size("1T"), 1024 * kGiB);
  EXPECT_EQ(parse_byte_size("123456"), 123456u);
  EXPECT_EQ(parse_byte_size("4096B"), 4096u);
  EXPECT_EQ(parse_byte_size("0"), 0u);
}

TEST(ParseByteSize, RejectsWhatIsNotASize) {
  for (const char* bad :
       {"", "G", "-1G", "1.2.3G", "12X", "1 G", " 1G", "1GG", ".", "1e3", "99999999999T"}) {
    EXPECT_THROW(parse_byte_size(bad), Error) << bad;
  }
  try {
    parse_byte_size("24Q");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'24Q'"), std::string::npos) << e.what();
  }
}

TEST(FormatBytes, PicksAReadableUnit) {
  EXPECT_EQ(format_bytes(900), "900 B");
  EXPECT_EQ(format_bytes(512 * kMiB), "512.0 MiB");
  EXPECT_EQ(format_bytes(22 * kGiB + 400 * kMiB), "22.4 GiB");
}

TEST(ComputeMemoryBudget, AvailablePlusOwnRssMinusReserve) {
  MemorySnapshot s;
  s.mem_available_bytes = 23 * kGiB;
  s.rss_bytes = 1 * kGiB;
  const MemoryBudget b = compute_memory_budget(s);
  EXPECT_EQ(b.limit_bytes, 24 * kGiB);
  EXPECT_EQ(b.reserve_bytes, 24 * kGiB / 20);  // 5% > 1 GiB
  EXPECT_EQ(b.budget_bytes, 24 * kGiB - 24 * kGiB / 20);
  EXPECT_EQ(b.source, "MemAvailable + RSS");
  EXPECT_FALSE(b.overridden);
}

TEST(ComputeMemoryBudget, CgroupLimitWinsWhenTighter) {
  MemorySnapshot s;
  s.mem_available_bytes = 100 * kGiB;
  s.cgroup_limit_bytes = 8 * kGiB;
  s.cgroup_source = "cgroup v2 /sys/fs/cgroup/x/memory.max";
  const MemoryBudget b = compute_memory_budget(s);
  EXPECT_EQ(b.limit_bytes, 8 * kGiB);
  EXPECT_EQ(b.reserve_bytes, kGiB);  // 1 GiB > 5%
  EXPECT_EQ(b.budget_bytes, 7 * kGiB);
  EXPECT_EQ(b.source, s.cgroup_source);
  EXPECT_NE(b.describe().find("7.0 GiB"), std::string::npos) << b.describe();
  s.cgroup_limit_bytes = 200 * kGiB;  // looser than the machine: the machine decides
  EXPECT_EQ(compute_memory_budget(s).limit_bytes, 100 * kGiB);
}

TEST(ComputeMemoryBudget, TooLittleMemoryGivesZero) {
  MemorySnapshot s;
  s.mem_available_bytes = 512 * kMiB;
  EXPECT_EQ(compute_memory_budget(s).budget_bytes, 0u);
}

TEST(MemoryBudget, OverrideReplacesTheComputedBudget) {
  const MemoryBudget b = memory_budget("3G");
  EXPECT_TRUE(b.overridden);
  EXPECT_EQ(b.budget_bytes, 3 * kGiB);
  EXPECT_GT(b.limit_bytes, 0u);
  EXPECT_NE(b.describe().find("--memory-budget"), std::string::npos);
  EXPECT_THROW(memory_budget("0"), Error);
  EXPECT_THROW(memory_budget("lots"), Error);
  const MemoryBudget live = memory_budget();
  EXPECT_FALSE(live.overridden);
  EXPECT_GT(live.limit_bytes, live.budget_bytes);
}

// A fake root with /proc and /sys files; paths are relative to it.
class FakeRoot {
 public:
  FakeRoot() : root_(std::string(DELTAFIN_BINARY_DIR) + "/memory_budget_test_root") {
    std::filesystem::remove_all(root_);
    put("proc/meminfo", "MemTotal:       32000000 kB\nMemAvailable:   20000000 kB\n");
    put("proc/self/status", "Name:\tdeltafin\nVmHWM:\t  300000 kB\nVmRSS:\t  200000 kB\n");
  }
  ~FakeRoot() { std::filesystem::remove_all(root_); }
  void put(const std::string& rel, const std::string& text) {
    const std::filesystem::path p = root_ + "/" + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(ReadMemorySnapshot, NoCgroupLimit) {
  FakeRoot fs;
  fs.put("proc/self/mountinfo",
         "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  fs.put("proc/self/cgroup", "0::/user.slice\n");
  fs.put("sys/fs/cgroup/user.slice/memory.max", "max\n");
  const MemorySnapshot s = read_memory_snapshot(fs.root());
  EXPECT_EQ(s.mem_total_bytes, 32000000ull * 1024);
  EXPECT_EQ(s.mem_available_bytes, 20000000ull * 1024);
  EXPECT_EQ(s.rss_bytes, 200000ull * 1024);
  EXPECT_EQ(s.cgroup_limit_bytes, 0u);
}

TEST(ReadMemorySnapshot, CgroupV2TakesTheTightestAncestor) {
  FakeRoot fs;
  fs.put("proc/self/mountinfo",
         "25 1 8:1 / / rw - ext4 /dev/vda rw\n"
         "31 23 0:28 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n");
  fs.put("proc/self/cgroup", "0::/a/b\n");
  fs.put("sys/fs/cgroup/a/b/memory.max", "16000000000\n");
  fs.put("sys/fs/cgroup/a/memory.max", "8000000000\n");
  const MemorySnapshot s = read_memory_snapshot(fs.root());
  EXPECT_EQ(s.cgroup_limit_bytes, 8000000000u);
  EXPECT_EQ(s.cgroup_source, "cgroup v2 /sys/fs/cgroup/a/memory.max");
}

TEST(ReadMemorySnapshot, CgroupV2InsideANamespace) {
  FakeRoot fs;  // the mount's top is our own cgroup, shown as "/" in /proc/self/cgroup
  fs.put("proc/self/mountinfo", "40 30 0:30 /ctr /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
  fs.put("proc/self/cgroup", "0::/\n");
  fs.put("sys/fs/cgroup/memory.max", "4294967296\n");
  EXPECT_EQ(read_memory_snapshot(fs.root()).cgroup_limit_bytes, 4 * kGiB);
}

TEST(ReadMemorySnapshot, CgroupV1MemoryController) {
  FakeRoot fs;
  fs.put("proc/self/mountinfo",
         "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
         "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
         "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
  fs.put("proc/self/cgroup", "4:memory:/jobs/42\n1:cpu:/\n0::/\n");
  fs.put("sys/fs/cgroup/memory/jobs/42/memory.limit_in_bytes", "9223372036854771712\n");
  fs.put("sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "6442450944\n");
  fs.put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  const MemorySnapshot s = read_memory_snapshot(fs.root());
  EXPECT_EQ(s.cgroup_limit_bytes, 6 * kGiB);
  EXPECT_EQ(s.cgroup_source, "cgroup v1 /sys/fs/cgroup/memory/jobs/memory.limit_in_bytes");
}

TEST(ReadMemorySnapshot, CgroupV1Unlimited) {
  FakeRoot fs;
  fs.put("proc/self/mountinfo",
         "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  fs.put("proc/self/cgroup", "4:memory:/x\n");
  fs.put("sys/fs/cgroup/memory/x/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_EQ(read_memory_snapshot(fs.root()).cgroup_limit_bytes, 0u);
}

TEST(Rss, CurrentGrowsWhenMemoryIsTouchedAndPeakFollows) {
  const uint64_t before = current_rss_bytes();
  ASSERT_GT(before, 0u);
  std::vector<char> block(64 * kMiB);
  std::memset(block.data(), 1, block.size());
  const uint64_t after = current_rss_bytes();
  EXPECT_GE(after, before + 60 * kMiB);
  EXPECT_GE(peak_rss_bytes(), after);
  EXPECT_EQ(block[12345], 1);
}

}  // namespace
}  // namespace deltafin::base
