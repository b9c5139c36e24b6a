// Placement: the planner (bytes in proportion to bandwidth, budgets, replicas of hot experts),
// the manifest and route-trace readers, and the streaming store reading placed copies: every
// expert whole from whichever holder, a missing folder, a short copy and a drive whose reads fail
// (injected in the queue) each reported and read from another holder or the shards.
#include "experts/placement.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <set>

#include "base/error.h"
#include "experts/streaming_expert_store.h"
#include "io/test_files.h"

namespace deltafin::experts {
namespace {

namespace fs = std::filesystem;

std::string scratch() { return std::string(DELTAFIN_BINARY_DIR) + "/placement_test_tmp"; }

PlanInput uniform_input(int layers, int experts, uint64_t nbytes) {
  PlanInput in;
  for (int l = 0; l < layers; ++l)
    for (int e = 0; e < experts; ++e) in.experts.push_back({l, e, nbytes});
  return in;
}

TEST(PlanPlacement, BytesFollowBandwidth) {
  PlanInput in = uniform_input(4, 64, 4096);
  in.gbps = {0.2, 0.4, 0.8};
  in.budget_bytes = {1 << 30, 1 << 30, 1 << 30};
  const auto layers = plan_placement(in);
  int count[3] = {};
  for (const auto& l : layers) {
    for (const PlacedExpert& pe : l) {
      ASSERT_EQ(pe.holders.size(), 1u);
      ++count[pe.holders[0]];
    }
  }
  // 256 experts in 1:2:4.
  EXPECT_NEAR(count[0], 256 / 7.0, 1.5);
  EXPECT_NEAR(count[1], 2 * 256 / 7.0, 1.5);
  EXPECT_NEAR(count[2], 4 * 256 / 7.0, 1.5);
}

TEST(PlanPlacement, BudgetsHoldAndHotExpertsGetReplicas) {
  PlanInput in = uniform_input(2, 10, 4000);  // 4096 on disk each
  in.gbps = {1.0, 1.0};
  in.budget_bytes = {12 * 4096, 12 * 4096};  // room for 4 replicas
  in.uses = {{{1, 3}, 50}, {{0, 7}, 40}, {{0, 1}, 30}, {{1, 9}, 20}, {{0, 0}, 10}, {{1, 1}, 5}};
  const auto layers = plan_placement(in);
  // Equal rates: primaries alternate (even ids on folder 0 in layer 0). The most used get copies
  // first, on the folder not holding them; once folder 0 is full, hot experts held by folder 1
  // are passed over and the next one that folder 1 can take gets the last room.
  EXPECT_EQ(layers[1][3].holders, (std::vector<int>{1, 0}));
  EXPECT_EQ(layers[0][7].holders, (std::vector<int>{1, 0}));
  EXPECT_EQ(layers[0][1].holders.size(), 1u);
  EXPECT_EQ(layers[1][9].holders.size(), 1u);
  EXPECT_EQ(layers[0][0].holders, (std::vector<int>{0, 1}));
  EXPECT_EQ(layers[1][1].holders.size(), 1u);
  EXPECT_NE(layers[1][3].holders[0], layers[1][3].holders[1]);
  int replicas = 0;
  for (const auto& l : layers)
    for (const PlacedExpert& pe : l) replicas += static_cast<int>(pe.holders.size()) - 1;
  EXPECT_EQ(replicas, 3);
  uint64_t per[2] = {};
  for (const auto& l : layers)
    for (const PlacedExpert& pe : l)
      for (int h : pe.holders) per[h] += placed_bytes(pe.nbytes);
  EXPECT_LE(per[0], in.budget_bytes[0]);
  EXPECT_LE(per[1], in.budget_bytes[1]);
}

TEST(PlanPlacement, TooLittleRoomIsAnErrorSayingHowMuch) {
  PlanInput in = uniform_input(1, 10, 4096);
  in.gbps = {1.0};
  in.budget_bytes = {5 * 4096};
  try {
    plan_placement(in);
    FAIL() << "expected an error";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--budget-per-drive"), std::string::npos) << e.what();
  }
}

TEST(PlacementManifest, RoundTripAndErrorsNameTheFile) {
  const std::string dir = scratch() + "/manifest";
  fs::remove_all(dir);
  fs::create_directories(dir);
  EXPECT_EQ(load_placement(dir), nullptr);
  Placement p;
  p.dirs = {"/a/x", "/b/y"};
  p.layers.resize(3);
  p.layers[2].resize(5);
  p.layers[2][4] = {1234, {1, 0}};
  write_placement(dir, p);
  const auto q = load_placement(dir);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dirs, p.dirs);
  ASSERT_NE(q->find(2, 4), nullptr);
  EXPECT_EQ(q->find(2, 4)->nbytes, 1234u);
  EXPECT_EQ(q->find(2, 4)->holders, (std::vector<int>{1, 0}));
  EXPECT_EQ(q->find(2, 3), nullptr);
  EXPECT_EQ(q->find(7, 0), nullptr);
  std::ofstream(placement_path(dir))
      << "{\"version\":1,\"drives\":[\"/a\"],\"experts\":[[0,0,9,[3]]]}";
  try {
    load_placement(dir);
    FAIL() << "expected an error";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(placement_path(dir)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holder 3"), std::string::npos) << e.what();
  }
}

TEST(CountRoutes, CountsEveryUseAndNamesABadLine) {
  const std::string dir = scratch() + "/routes";
  fs::create_directories(dir);
  const std::string path = dir + "/r.jsonl";
  std::ofstream(path) << "{\"position\":0,\"rows\":1,\"layer\":3,\"experts\":[5,8]}\n"
                         "{\"position\":1,\"rows\":1,\"layer\":3,\"experts\":[5]}\n";
  const auto uses = count_routes(path);
  EXPECT_EQ(uses.at({3, 5}), 2u);
  EXPECT_EQ(uses.at({3, 8}), 1u);
  std::ofstream(path, std::ios::app) << "{\"layer\":\"x\"}\n";
  try {
    count_routes(path);
    FAIL() << "expected an error";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":3"), std::string::npos) << e.what();
  }
}

// A pread queue whose reads of files under `poison` fail with EIO, as a dying drive's would.
class FailingQueue : public io::ReadQueue {
 public:
  FailingQueue(int depth, std::vector<std::string> poison)
      : ReadQueue(depth), inner_(io::make_pread_queue(depth)), poison_(std::move(poison)) {}
  const char* name() const override { return "failing"; }
  int in_flight() const override { return inner_->in_flight() + static_cast<int>(failed_.size()); }
  int max_in_flight() const override { return inner_->max_in_flight(); }
  void submit(const io::ReadRequest& r) override {
    for (const std::string& p : poison_) {
      if (r.file->path().find(p) == std::string::npos) continue;
      ++failures;
      failed_.push_back({r.user_tag, 0, EIO, r.file->path() + ": injected EIO"});
      return;
    }
    inner_->submit(r);
  }
  bool wait(io::ReadCompletion* out) override {
    if (take(out)) return true;
    return inner_->wait(out);
  }
  void wake() override { inner_->wake(); }
  bool poll(io::ReadCompletion* out) override { return take(out) || inner_->poll(out); }
  std::atomic<int> failures{0};

 private:
  bool take(io::ReadCompletion* out) {
    if (failed_.empty()) return false;
    *out = failed_.front();
    failed_.pop_front();
    return true;
  }
  std::unique_ptr<io::ReadQueue> inner_;
  std::vector<std::string> poison_;
  std::deque<io::ReadCompletion> failed_;  // touched by the owner thread only
};

// Layer 0: n experts of 10,000 bytes at odd offsets of a pattern file; copies placed in `dirs`.
struct Placed {
  ExpertCatalog catalog;
  std::shared_ptr<Placement> placement = std::make_shared<Placement>();
};

Placed make_placed(const std::string& root, int n, int n_dirs) {
  fs::remove_all(root);
  Placed p;
  constexpr uint64_t kSpan = 10'000, kStart = 777;
  const std::string shard =
      io::testing::write_pattern_file(root, "shard.bin", kStart + n * kSpan + 10);
  ExpertLayout lay;
  lay.gate = {kernels::WeightDType::kBF16, 0, 0, 50, 100};
  lay.down = {kernels::WeightDType::kBF16, 0, 0, 50, 100};
  lay.up = {kernels::WeightDType::kBF16, 0, 0, 50, 100};
  lay.span_bytes = kSpan;
  p.catalog.layers.resize(1);
  p.catalog.layers[0].layout = lay;
  std::vector<char> bytes(kSpan);
  p.placement->layers.resize(1);
  for (int d = 0; d < n_dirs; ++d) {
    p.placement->dirs.push_back(root + "/drive" + std::to_string(d));
    fs::create_directories(p.placement->dirs.back());
  }
  for (int e = 0; e < n; ++e) {
    const uint64_t off = kStart + e * kSpan;
    p.catalog.layers[0].spans.push_back({0, e, shard, off, kSpan});
    for (uint64_t i = 0; i < kSpan; ++i)
      bytes[i] = static_cast<char>(io::testing::pattern_byte(off + i));
    PlacedExpert pe{kSpan, {}};
    for (int d = 0; d < n_dirs; ++d) {  // every expert on every folder, first holder rotating
      const int h = (e + d) % n_dirs;
      pe.holders.push_back(h);
      std::ofstream(placed_file(p.placement->dirs[h], 0, e), std::ios::binary)
          .write(bytes.data(), static_cast<std::streamsize>(kSpan));
    }
    p.placement->layers[0].push_back(pe);
  }
  return p;
}

// Requests every expert once and checks each one's bytes against the shard's pattern.
void expect_all_whole(StreamingExpertStore& store, const Placed& p) {
  std::vector<int32_t> ids;
  for (size_t e = 0; e < p.catalog.layers[0].spans.size(); ++e)
    ids.push_back(static_cast<int32_t>(e));
  auto batch = store.request(0, ids);
  std::set<int32_t> seen;
  for (size_t i = 0; i < batch->size(); ++i) {
    const ReadyExpert r = batch->acquire_next();
    const format::ExpertSpan& span = p.catalog.layers[0].spans[r.expert];
    EXPECT_EQ(io::testing::first_mismatch(r.weights.gate.data, span.offset, span.nbytes), -1)
        << "expert " << r.expert;
    seen.insert(r.expert);
    batch->release(r.index);
  }
  EXPECT_EQ(seen.size(), ids.size());
}

StreamingStoreOptions options_with(std::shared_ptr<const Placement> placement) {
  StreamingStoreOptions o;
  o.n_slots = 16;
  o.allow_direct = false;
  o.placement = std::move(placement);
  return o;
}

TEST(PlacedStore, ReadsCopiesFromTheDrivesAndNotTheShard) {
  const Placed p = make_placed(scratch() + "/ok", 8, 2);
  auto sched = std::make_shared<io::ReadScheduler>(4);
  StreamingExpertStore store(p.catalog, sched, options_with(p.placement));
  expect_all_whole(store, p);
  // Every read went to a placed file: the shard was opened (its drive known) but never read.
  uint64_t read = 0;
  for (const io::DriveStats& d : sched->drives().stats()) read += d.bytes;
  EXPECT_GE(read, 8u * 10'000);
}

TEST(PlacedStore, MissingFolderAndShortCopyFallBack) {
  Placed p = make_placed(scratch() + "/missing", 8, 2);
  fs::remove_all(p.placement->dirs[1]);
  fs::resize_file(placed_file(p.placement->dirs[0], 0, 3), 5000);
  StreamingExpertStore store(p.catalog, std::make_shared<io::ReadScheduler>(4),
                             options_with(p.placement));
  expect_all_whole(store, p);
}

TEST(PlacedStore, ADriveWhoseReadsFailMovesToAnotherHolder) {
  const Placed p = make_placed(scratch() + "/eio", 8, 3);
  auto q = std::make_unique<FailingQueue>(4, std::vector<std::string>{"/drive1/"});
  FailingQueue* failing = q.get();
  StreamingExpertStore store(p.catalog, std::make_shared<io::ReadScheduler>(std::move(q), 4),
                             options_with(p.placement));
  expect_all_whole(store, p);
  EXPECT_GE(failing->failures.load(), 1);  // drive1 was first holder of some experts
}

TEST(PlacedStore, EveryHolderFailingFallsBackToTheShard) {
  const Placed p = make_placed(scratch() + "/all", 6, 2);
  auto q = std::make_unique<FailingQueue>(4, std::vector<std::string>{"/drive0/", "/drive1/"});
  StreamingExpertStore store(p.catalog, std::make_shared<io::ReadScheduler>(std::move(q), 4),
                             options_with(p.placement));
  expect_all_whole(store, p);
}

// Guesses for experts held on one drive take at most that drive's bandwidth share of the prefetch
// allowance. Needs a second device: /dev/shm (tmpfs) when it is one.
TEST(PlacedStore, OneDriveTakesOnlyItsShareOfThePrefetchAllowance) {
  const std::string shm = "/dev/shm/deltafin-placement-test-" + std::to_string(::getpid());
  std::error_code ec;
  fs::create_directories(shm, ec);
  struct stat a {
  }, b{};
  if (ec || ::stat(shm.c_str(), &a) != 0 || ::stat(DELTAFIN_BINARY_DIR, &b) != 0 ||
      a.st_dev == b.st_dev) {
    fs::remove_all(shm, ec);
    GTEST_SKIP() << "/dev/shm is not a separate writable device here";
  }
  const std::string cache = scratch() + "/empty-drive-cache.tsv";
  fs::create_directories(scratch());
  std::ofstream(cache).close();
  ::setenv("DELTAFIN_DRIVE_CACHE", cache.c_str(), 1);  // both drives start at the same rate
  Placed p = make_placed(scratch() + "/allowance", 8, 1);
  for (int e = 0; e < 8; ++e)
    fs::copy_file(placed_file(p.placement->dirs[0], 0, e), placed_file(shm, 0, e));
  p.placement->dirs[0] = shm;  // every copy on the tmpfs drive; the shard on the build's disk
  StreamingStoreOptions o = options_with(p.placement);
  o.max_prefetch_slots = 4;
  StreamingExpertStore store(p.catalog, std::make_shared<io::ReadScheduler>(4), o);
  const std::vector<int32_t> guess = {0, 1, 2, 3, 4, 5, 6, 7};
  store.prefetch(0, guess);
  // Two drives of equal rate: half of 4.
  EXPECT_EQ(store.stats().prefetch_reads, 2u);
  auto batch = store.request(0, guess);
  for (size_t i = 0; i < batch->size(); ++i) batch->release(batch->acquire_next().index);
  ::unsetenv("DELTAFIN_DRIVE_CACHE");
  fs::remove_all(shm, ec);
}

}  // namespace
}  // namespace deltafin::experts
