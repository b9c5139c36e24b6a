// The streaming install end to end in-process: run_setup --stream against the local server, then
// RemoteExpertSource: verbatim cache files, one shared request for concurrent needs, bounded
// fetch loops, failures that leave nothing behind, and the pool status and warning.
#include <gtest/gtest.h>

#include <thread>

#include "base/error.h"
#include "setup/expert_source.h"
#include "setup/fetch_plan.h"
#include "setup/files.h"
#include "setup/setup.h"
#include "setup/testing/hf_test_server.h"
#include "setup/verify.h"

namespace deltafin::setup {
namespace {

const std::string kFixture = std::string(DELTAFIN_SOURCE_DIR) + "/tests/fixtures/k3-tiny-a";

class ExpertSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    http_.backoff_initial_ms = 5;
    http_.backoff_max_ms = 20;
    http_.max_attempts = 3;
    SetupOptions o;
    o.remote = {server_.url(), "test/tiny", "main"};
    o.dir = dir_.path();
    o.mode = InstallMode::kStream;
    o.http = http_;
    const SetupReport r = run_setup(o);
    ASSERT_EQ(r.kind, InstallKind::kStream);
    ASSERT_EQ(r.commit, testing::HfTestServer::kCommit);
    server_.clear_log();
  }
  std::unique_ptr<RemoteExpertSource> open(int n_connections = 4) {
    ExpertSourceOptions o;
    o.n_connections = n_connections;
    o.http = http_;
    return RemoteExpertSource::open(dir_.path(), o);
  }
  std::string original(const RemoteExpertSource& s, int64_t layer, int64_t expert) {
    const ExpertLayer& l = *s.manifest().find_layer(layer);
    return testing::read_bytes(kFixture + "/" + s.manifest().files[l.file[expert]].name,
                               l.offset[expert], l.span_bytes);
  }
  // The server logs a request once its answer is sent, which may be just after the client has
  // it: wait (bounded) for `at_least` entries, then count.
  int expert_requests(int at_least = 0) {
    int n = 0;
    for (int i = 0; i < 100; ++i) {
      n = 0;
      for (const auto& r : server_.log()) n += r["method"] == "GET" && r["status"] == 206;
      if (n >= at_least) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return n;
  }

  testing::HfTestServer server_{{"test/tiny=" + kFixture}};
  testing::TempDir dir_;
  HttpOptions http_;
};

TEST_F(ExpertSourceTest, FetchesVerbatimSpansOnce) {
  auto s = open();
  EXPECT_FALSE(s->find_local(1, 0));
  const ExpertBytes b = s->ensure_local(1, 0);
  EXPECT_EQ(b.offset, 0u);
  EXPECT_EQ(read_small_file(b.path), original(*s, 1, 0));
  EXPECT_EQ(b.path, dir_ / "experts/L001/E0000.bin");
  ASSERT_TRUE(s->find_local(1, 0));
  s->ensure_local(1, 0);  // local now: no request
  EXPECT_EQ(expert_requests(1), 1);
  EXPECT_EQ(s->stats().experts_fetched, 1u);
  EXPECT_THROW(s->find_local(0, 0), base::Error);   // the dense layer has no experts
  EXPECT_THROW(s->find_local(1, 32), base::Error);  // k3-tiny-a has 32 experts per layer
}

TEST_F(ExpertSourceTest, ConcurrentNeedsShareOneRequest) {
  // A slow answer keeps the first request in flight while the others ask.
  server_.faults("[{\"match\": \"/cdn/\", \"kind\": \"slow\", \"rate\": 4000, \"times\": -1}]");
  auto s = open();
  std::vector<std::thread> threads;
  std::vector<std::string> got(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { got[t] = read_small_file(s->ensure_local(3, 7).path); });
  for (std::thread& t : threads) t.join();
  for (const std::string& g : got) EXPECT_EQ(g, original(*s, 3, 7));
  EXPECT_EQ(expert_requests(1), 1);
}

TEST_F(ExpertSourceTest, FetchPlanRespectsLayersAndCompletes) {
  auto s = open(3);
  ExpertFetchPlan plan = plan_expert_fetch(*s, LayerRanges::parse("2-3"));
  ASSERT_EQ(plan.layers.size(), 2u);
  EXPECT_EQ(plan.missing.size(), 64u);
  fetch_planned(*s, plan, 6, nullptr);
  EXPECT_EQ(expert_requests(64), 64);
  for (int64_t e = 0; e < 32; ++e)
    EXPECT_EQ(read_small_file(s->find_local(2, e)->path), original(*s, 2, e));
  EXPECT_TRUE(plan_expert_fetch(*s, LayerRanges::parse("2-3")).missing.empty());
  const ExpertPoolStatus st = expert_pool_status(dir_.path());
  EXPECT_TRUE(st.streaming);
  EXPECT_EQ(st.n_local, 64);
  EXPECT_EQ(st.n_experts, 12 * 32);
  EXPECT_EQ(st.bytes_missing, st.bytes_total / 12 * 10);
  const auto warning = streaming_warning(dir_.path());
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("16.7% of experts are local (64 of 384)"), std::string::npos) << *warning;
  // The locator sees the same files; for a folder of shards it finds experts in the shards.
  const ExpertLocator loc = ExpertLocator::open(dir_.path());
  EXPECT_TRUE(loc.streaming());
  EXPECT_TRUE(loc.find(2, 5));
  EXPECT_FALSE(loc.find(4, 5));
  const ExpertLocator full = ExpertLocator::open(kFixture);
  EXPECT_FALSE(full.streaming());
  const auto span = full.find(2, 5);
  ASSERT_TRUE(span);
  EXPECT_EQ(testing::read_bytes(span->path, span->offset, span->nbytes), original(*s, 2, 5));
  EXPECT_FALSE(streaming_warning(kFixture));
}

TEST_F(ExpertSourceTest, FailuresLeaveNothingAndRethrow) {
  server_.faults("[{\"match\": \"/cdn/\", \"kind\": \"status\", \"status\": 500, \"times\": -1}]");
  auto s = open(2);
  ExpertFetchPlan plan = plan_expert_fetch(*s, LayerRanges::parse("5"));
  try {
    fetch_planned(*s, plan, 4, nullptr);
    FAIL() << "no error";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("fetching layer 5 expert"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HTTP 500"), std::string::npos) << e.what();
  }
  // It stopped starting new fetches after the first failure, and left no file behind.
  EXPECT_LE(expert_requests(), 3 * (4 + 2));
  std::error_code ec;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir_ / "experts", ec))
    EXPECT_FALSE(f.is_regular_file()) << f.path();
  server_.faults("[]");
  fetch_planned(*s, plan_expert_fetch(*s, LayerRanges::parse("5")), 4, nullptr);
  EXPECT_EQ(expert_pool_status(dir_.path()).n_local, 32);
}

TEST_F(ExpertSourceTest, ClosingFailsPendingRequests) {
  server_.faults("[{\"match\": \"/cdn/\", \"kind\": \"slow\", \"rate\": 20000, \"times\": -1}]");
  std::vector<std::shared_future<ExpertBytes>> futures;
  {
    auto s = open(1);
    for (int64_t e = 0; e < 6; ++e) futures.push_back(s->fetch_async(7, e));
  }  // closes with most requests still queued
  int n_ok = 0, n_closed = 0;
  for (auto& f : futures) {
    try {
      f.get();
      ++n_ok;
    } catch (const base::Error& e) {
      const std::string m = e.what();  // queued: "closed"; running when closed: "cancelled"
      EXPECT_TRUE(m.find("closed") != std::string::npos || m.find("cancelled") != std::string::npos)
          << m;
      ++n_closed;
    }
  }
  EXPECT_GE(n_closed, 1);
  EXPECT_EQ(n_ok + n_closed, 6);
  EXPECT_EQ(expert_pool_status(dir_.path()).n_local, n_ok);
}

// A fetch that is waiting out a 30 s backoff, or reading from a server that stalls for 60 s, must
// not hold the destructor (and with it the shutdown of the engine or server) for that long.
TEST_F(ExpertSourceTest, ClosingCancelsRunningFetchesPromptly) {
  http_.backoff_initial_ms = 30000;
  http_.backoff_max_ms = 30000;
  http_.stall_seconds = 60;
  const char* kFaults[] = {
      "[{\"match\": \"/cdn/\", \"kind\": \"status\", \"status\": 503, \"times\": -1}]",
      "[{\"match\": \"/cdn/\", \"kind\": \"stall\", \"after_bytes\": 100, \"seconds\": 60, "
      "\"times\": -1}]"};
  int64_t expert = 0;
  for (const char* faults : kFaults) {
    SCOPED_TRACE(faults);
    server_.faults(faults);
    std::shared_future<ExpertBytes> f;
    double closing_seconds = 0;
    {
      auto s = open(1);
      f = s->fetch_async(7, expert++);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // into the backoff or stall
      const auto t0 = std::chrono::steady_clock::now();
      s.reset();
      closing_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    EXPECT_LT(closing_seconds, 5.0);
    try {
      f.get();
      ADD_FAILURE() << "the fetch succeeded through the fault";
    } catch (const base::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
    }
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "experts", ec))
      EXPECT_FALSE(e.is_regular_file()) << e.path();  // no cache file, no temporary
  }
}

TEST_F(ExpertSourceTest, RemovesTemporaryFilesOfDeadProcesses) {
  make_dirs(dir_ / "experts/L001");
  write_file_atomic(dir_ / "experts/L001/E0003.bin.tmp-999999999-0", "partial");
  const std::string mine =
      dir_ / ("experts/L001/E0004.bin.tmp-" + std::to_string(::getpid()) + "-0");
  write_file_atomic(mine, "a live process");
  auto s = open();
  EXPECT_FALSE(file_size(dir_ / "experts/L001/E0003.bin.tmp-999999999-0"));
  EXPECT_TRUE(file_size(mine));  // its writer still runs
  EXPECT_FALSE(s->find_local(1, 3));
}

TEST_F(ExpertSourceTest, RerunOfSetupIsANoOpAndRefusesAnotherRepo) {
  SetupOptions o;
  o.remote = {server_.url(), "test/tiny", "main"};
  o.dir = dir_.path();
  o.http = http_;
  const SetupReport r = run_setup(o);  // no flag: keeps the existing kind
  EXPECT_EQ(r.kind, InstallKind::kStream);
  for (const auto& req : server_.log()) EXPECT_NE(req["method"], "GET") << req.dump();
  o.remote.repo = "test/other";
  EXPECT_THROW(run_setup(o), base::Error);
}

TEST_F(ExpertSourceTest, VerifyReassemblesShardsAgainstTheirSha256) {
  auto s = open();
  using R = ShardCheck::Result;
  for (const ShardCheck& c : verify_streaming_install(dir_.path())) {
    EXPECT_EQ(c.result, R::kIncomplete) << c.shard;
    EXPECT_GT(c.n_missing, 0);
  }
  fetch_planned(*s, plan_expert_fetch(*s, LayerRanges::parse("")), 8, nullptr);
  auto checks = verify_streaming_install(dir_.path());
  ASSERT_EQ(checks.size(), 2u);
  for (const ShardCheck& c : checks) EXPECT_EQ(c.result, R::kOk) << c.shard << " " << c.detail;
  // One flipped byte in one cached expert is found, in the shard that expert belongs to.
  const ExpertLayer& l = *s->manifest().find_layer(10);
  const std::string path = s->find_local(10, 3)->path;
  std::string bytes = read_small_file(path);
  bytes[100] ^= 1;
  write_file_atomic(path, bytes);
  checks = verify_streaming_install(dir_.path());
  for (size_t i = 0; i < checks.size(); ++i)
    EXPECT_EQ(checks[i].result, i == l.file[3] ? R::kMismatch : R::kOk) << checks[i].shard;
}

}  // namespace
}  // namespace deltafin::setup
