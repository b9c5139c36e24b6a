// Placement: the planners (whole: bytes in proportion to bandwidth, budgets, replicas of hot
// experts; stripe: pieces by bandwidth, aligned, covering each span once), the manifest and
// route-trace readers, and the streaming store reading placed copies and stripes: every expert
// whole from whichever holder or from all its pieces, a missing folder, a short copy or piece and
// a drive whose reads fail (injected in the queue) each reported and read from another holder or
// the shards.
#include "experts/placement.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

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

// Every byte of the span in exactly one piece, in order; every piece but the last aligned.
void expect_covers(const std::vector<StripePiece>& pieces, uint64_t nbytes) {
  uint64_t at = 0;
  std::set<int> dirs;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i].offset, at) << "piece " << i;
    EXPECT_GT(pieces[i].nbytes, 0u) << "piece " << i;
    EXPECT_EQ(pieces[i].offset % kPieceAlignment, 0u) << "piece " << i;
    if (i + 1 < pieces.size()) {
      EXPECT_EQ(pieces[i].nbytes % kPieceAlignment, 0u) << "piece " << i;
    }
    EXPECT_TRUE(dirs.insert(pieces[i].dir).second) << "two pieces on folder " << pieces[i].dir;
    at += pieces[i].nbytes;
  }
  EXPECT_EQ(at, nbytes);
}

TEST(StripePieces, SizesFollowBandwidthAlignedAndCoverTheSpanOnce) {
  constexpr uint64_t kK3 = 17'547'264;  // 4284 blocks
  for (const std::vector<double>& gbps : std::vector<std::vector<double>>{
           {1}, {1, 1}, {1, 1, 1}, {0.2, 0.4, 0.8}, {13.6, 7.1, 7.1, 5.7}}) {
    double total = 0;
    for (double g : gbps) total += g;
    for (uint64_t nbytes : {kK3, kK3 + 1000, uint64_t{26'112}, uint64_t{4096}, uint64_t{1}}) {
      for (size_t rotate = 0; rotate < gbps.size(); ++rotate) {
        const std::vector<StripePiece> pieces = stripe_pieces(nbytes, gbps, rotate);
        expect_covers(pieces, nbytes);
        if (nbytes < kK3) continue;
        EXPECT_EQ(pieces.front().dir, static_cast<int>(rotate % gbps.size()));
        EXPECT_EQ(pieces.size(), gbps.size());
        for (const StripePiece& p : pieces)  // within a block of its share
          EXPECT_NEAR(static_cast<double>(p.nbytes), nbytes * gbps[p.dir] / total, kPieceAlignment)
              << "folder " << p.dir << " of " << gbps.size();
      }
    }
  }
  // Equal drives split K3's expert exactly: 4284 blocks are 4 x 1071.
  for (const StripePiece& p : stripe_pieces(kK3, {1, 1, 1, 1}, 0)) EXPECT_EQ(p.nbytes, kK3 / 4);
}

TEST(PlanStripes, EveryFolderGetsItsShareWithinBudgetAndRotationEvensTheRounding) {
  PlanInput in = uniform_input(2, 64, 26'112);  // the demo's experts: 6.4 blocks over 4 folders
  in.gbps = {1, 1, 1, 1};
  in.budget_bytes = {1 << 30, 1 << 30, 1 << 30, 1 << 30};
  const auto layers = plan_stripes(in);
  uint64_t per[4] = {};
  for (const auto& l : layers) {
    ASSERT_EQ(l.size(), 64u);
    for (const PlacedExpert& pe : l) {
      EXPECT_TRUE(pe.holders.empty());
      EXPECT_EQ(pe.nbytes, 26'112u);
      expect_covers(pe.pieces, pe.nbytes);
      for (const StripePiece& p : pe.pieces) per[p.dir] += placed_bytes(p.nbytes);
    }
  }
  // 7 blocks on disk per expert, 2 + 2 + 2 + 1 rotating: each folder holds 7/4 of 128 experts.
  for (uint64_t b : per) EXPECT_EQ(b, 128u * 7 / 4 * 4096);
  // A folder whose share does not fit is named; the bytes cannot go elsewhere.
  in.budget_bytes[2] = per[2] - 4096;
  in.names = {"/a", "/b", "/c", "/d"};
  try {
    plan_stripes(in);
    FAIL() << "expected an error";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("on /c"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--budget-per-drive"), std::string::npos) << e.what();
  }
}

TEST(PlanStripes, ASubsetWithOrdinalsCutsEachExpertAsTheWholePlanDoes) {
  // A streaming install places only its local experts; each one's pieces must be the ones the
  // plan over every expert gives it, so placing again after more fetches keeps what is written.
  PlanInput all = uniform_input(2, 64, 26'112);
  all.gbps = {1, 2, 3};
  all.budget_bytes = {1 << 30, 1 << 30, 1 << 30};
  const auto whole = plan_stripes(all);
  PlanInput some = all;
  some.experts.clear();
  for (size_t i = 0; i < all.experts.size(); i += 3) {
    some.experts.push_back(all.experts[i]);
    some.experts.back().ordinal = static_cast<int64_t>(i);
  }
  const auto part = plan_stripes(some);
  size_t checked = 0, rotated_apart = 0;
  for (size_t i = 0; i < all.experts.size(); i += 3) {
    const PlanInput::Expert& e = all.experts[i];
    const PlacedExpert& got = part[e.layer][e.expert];
    EXPECT_EQ(got.pieces, whole[e.layer][e.expert].pieces) << "expert " << i;
    // Without the ordinal the subset's k-th expert would be cut as the whole plan's k-th.
    rotated_apart += stripe_pieces(e.nbytes, all.gbps, i / 3) != got.pieces;
    ++checked;
  }
  EXPECT_EQ(checked, 43u);
  EXPECT_GT(rotated_apart, 0u);
  // Experts left out are not placed.
  EXPECT_FALSE(part[all.experts[1].layer][all.experts[1].expert].placed());
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

TEST(PlacementManifest, StripeRoundTripAndEachBadPieceNamed) {
  const std::string dir = scratch() + "/manifest-stripe";
  fs::remove_all(dir);
  fs::create_directories(dir);
  Placement p;
  p.layout = Layout::kStripe;
  p.dirs = {"/a/x", "/b/y", "/c/z"};
  p.layers.resize(2);
  p.layers[1].resize(3);
  p.layers[1][2] = {20'000, {}, stripe_pieces(20'000, {1, 2, 1}, 1)};
  write_placement(dir, p);
  const auto q = load_placement(dir);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->layout, Layout::kStripe);
  EXPECT_EQ(q->dirs, p.dirs);
  ASSERT_NE(q->find(1, 2), nullptr);
  EXPECT_EQ(q->find(1, 2)->pieces, p.layers[1][2].pieces);
  EXPECT_EQ(q->find(1, 1), nullptr);
  // A whole-layout manifest of before striping (version 1) still loads as whole.
  std::ofstream(placement_path(dir))
      << "{\"version\":1,\"drives\":[\"/a\"],\"experts\":[[0,0,9,[0]]]}";
  ASSERT_NE(load_placement(dir), nullptr);
  EXPECT_EQ(load_placement(dir)->layout, Layout::kWhole);
  const auto refused = [&](const std::string& text, const std::string& says) {
    std::ofstream(placement_path(dir)) << text;
    try {
      load_placement(dir);
      ADD_FAILURE() << "accepted " << text;
    } catch (const base::Error& e) {
      EXPECT_NE(std::string(e.what()).find(placement_path(dir)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const std::string head = "{\"version\":2,\"layout\":\"stripe\",\"drives\":[\"/a\",\"/b\"],";
  refused(head + "\"experts\":[[0,3,9000,[[0,4096],[1,4903]]]]}", "add up to 8999 bytes");
  refused(head + "\"experts\":[[0,3,9000,[[0,4000],[1,5000]]]]}",
          "layer 0 expert 3: piece 0: 4000 bytes is not a multiple of 4096");
  refused(head + "\"experts\":[[0,3,9000,[[0,4096],[2,4904]]]]}", "piece 1: drive 2 is not one");
  refused(head + "\"experts\":[[0,3,9000,[]]]}", "no pieces");
  refused(head + "\"experts\":[[0,3,9000,[[0,4096,1]]]]}", "expected [drive, bytes]");
  refused("{\"version\":2,\"layout\":\"diagonal\",\"drives\":[],\"experts\":[]}", "field layout");
  refused("{\"version\":3,\"drives\":[],\"experts\":[]}", "field version: expected 1 or 2");
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

// A pread queue that the test queues below wrap: each overrides only what it injects.
class ForwardingQueue : public io::ReadQueue {
 public:
  explicit ForwardingQueue(int depth) : ReadQueue(depth), inner_(io::make_pread_queue(depth)) {}
  int in_flight() const override { return inner_->in_flight(); }
  int max_in_flight() const override { return inner_->max_in_flight(); }
  void submit(const io::ReadRequest& r) override { inner_->submit(r); }
  bool wait(io::ReadCompletion* out) override { return inner_->wait(out); }
  void wake() override { inner_->wake(); }
  bool poll(io::ReadCompletion* out) override { return inner_->poll(out); }

 private:
  std::unique_ptr<io::ReadQueue> inner_;
};

// A pread queue whose reads of files under `poison` fail with EIO, as a dying drive's would.
class FailingQueue : public ForwardingQueue {
 public:
  FailingQueue(int depth, std::vector<std::string> poison)
      : ForwardingQueue(depth), poison_(std::move(poison)) {}
  const char* name() const override { return "failing"; }
  int in_flight() const override {
    return ForwardingQueue::in_flight() + static_cast<int>(failed_.size());
  }
  void submit(const io::ReadRequest& r) override {
    for (const std::string& p : poison_) {
      if (r.file->path().find(p) == std::string::npos) continue;
      ++failures;
      failed_.push_back({r.user_tag, 0, EIO, r.file->path() + ": injected EIO"});
      return;
    }
    ForwardingQueue::submit(r);
  }
  bool wait(io::ReadCompletion* out) override { return take(out) || ForwardingQueue::wait(out); }
  bool poll(io::ReadCompletion* out) override { return take(out) || ForwardingQueue::poll(out); }
  std::atomic<int> failures{0};

 private:
  bool take(io::ReadCompletion* out) {
    if (failed_.empty()) return false;
    *out = failed_.front();
    failed_.pop_front();
    return true;
  }
  std::vector<std::string> poison_;
  std::deque<io::ReadCompletion> failed_;  // touched by the owner thread only
};

// A pread queue whose completions wait behind a gate: while it is shut, the owner's wait() returns
// nothing (or false when woken), so a test can act while a read is surely still in flight.
class GatedQueue : public ForwardingQueue {
 public:
  explicit GatedQueue(int depth) : ForwardingQueue(depth) {}
  const char* name() const override { return "gated"; }
  bool wait(io::ReadCompletion* out) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return open_ || woken_; });
      if (!open_) {
        woken_ = false;
        return false;
      }
    }
    return ForwardingQueue::wait(out);
  }
  void wake() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = true;
    }
    cv_.notify_all();
    ForwardingQueue::wake();
  }
  bool poll(io::ReadCompletion* out) override { return is_open() && ForwardingQueue::poll(out); }
  void set_open(bool open) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = open;
    }
    cv_.notify_all();
  }

 private:
  bool is_open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true, woken_ = false;
};

// Layer 0: n experts of `span` bytes at odd offsets of a pattern file, and n_dirs empty folders
// for a placement.
struct Placed {
  ExpertCatalog catalog;
  std::shared_ptr<Placement> placement = std::make_shared<Placement>();
};

Placed make_unplaced(const std::string& root, int n, int n_dirs, uint64_t span) {
  fs::remove_all(root);
  Placed p;
  constexpr uint64_t kStart = 777;
  const std::string shard =
      io::testing::write_pattern_file(root, "shard.bin", kStart + n * span + 10);
  ExpertLayout lay;
  lay.gate = {kernels::WeightDType::kBF16, 0, 0, 50, 100};
  lay.down = {kernels::WeightDType::kBF16, 0, 0, 50, 100};
  lay.up = {kernels::WeightDType::kBF16, 0, 0, 50, 100};
  lay.span_bytes = span;
  p.catalog.layers.resize(1);
  p.catalog.layers[0].layout = lay;
  p.placement->layers.resize(1);
  for (int d = 0; d < n_dirs; ++d) {
    p.placement->dirs.push_back(root + "/drive" + std::to_string(d));
    fs::create_directories(p.placement->dirs.back());
  }
  for (int e = 0; e < n; ++e)
    p.catalog.layers[0].spans.push_back({0, e, shard, kStart + e * span, span});
  return p;
}

// Bytes [from, from + n) of expert e's span (the shard's pattern) written to `path`.
void write_span_bytes(const Placed& p, int e, uint64_t from, uint64_t n, const std::string& path) {
  std::vector<char> bytes(n);
  const uint64_t off = p.catalog.layers[0].spans[e].offset + from;
  for (uint64_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(io::testing::pattern_byte(off + i));
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
}

// A folder on a second drive for the tests that need two: under /dev/shm (tmpfs) when that is a
// writable device other than the build's (`path` empty otherwise). While it lives, the drive cache
// is an empty file, so both drives start at the same rate.
struct SecondDrive {
  explicit SecondDrive(const std::string& name) {
    const std::string dir = "/dev/shm/" + name + "-" + std::to_string(::getpid());
    std::error_code ec;
    fs::create_directories(dir, ec);
    struct stat a {
    }, b{};
    if (ec || ::stat(dir.c_str(), &a) != 0 || ::stat(DELTAFIN_BINARY_DIR, &b) != 0 ||
        a.st_dev == b.st_dev) {
      fs::remove_all(dir, ec);
      return;
    }
    path = dir;
    const std::string cache = scratch() + "/empty-drive-cache.tsv";
    fs::create_directories(scratch());
    std::ofstream(cache).close();
    ::setenv("DELTAFIN_DRIVE_CACHE", cache.c_str(), 1);
  }
  ~SecondDrive() {
    if (path.empty()) return;
    ::unsetenv("DELTAFIN_DRIVE_CACHE");
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  SecondDrive(const SecondDrive&) = delete;
  SecondDrive& operator=(const SecondDrive&) = delete;
  std::string path;
};

// Whole copies of 10,000-byte experts, each on every folder with the first holder rotating.
Placed make_placed(const std::string& root, int n, int n_dirs) {
  constexpr uint64_t kSpan = 10'000;
  Placed p = make_unplaced(root, n, n_dirs, kSpan);
  for (int e = 0; e < n; ++e) {
    PlacedExpert pe{kSpan, {}};
    for (int d = 0; d < n_dirs; ++d) {
      const int h = (e + d) % n_dirs;
      pe.holders.push_back(h);
      write_span_bytes(p, e, 0, kSpan, placed_file(p.placement->dirs[h], 0, e));
    }
    p.placement->layers[0].push_back(pe);
  }
  return p;
}

// 30,000-byte experts (8 blocks, the last short) striped over the folders by `gbps`.
Placed make_striped(const std::string& root, int n, const std::vector<double>& gbps) {
  constexpr uint64_t kSpan = 30'000;
  Placed p = make_unplaced(root, n, static_cast<int>(gbps.size()), kSpan);
  p.placement->layout = Layout::kStripe;
  for (int e = 0; e < n; ++e) {
    PlacedExpert pe{kSpan, {}, stripe_pieces(kSpan, gbps, e)};
    for (const StripePiece& piece : pe.pieces)
      write_span_bytes(p, e, piece.offset, piece.nbytes,
                       piece_file(p.placement->dirs[piece.dir], 0, e, piece.offset));
    p.placement->layers[0].push_back(pe);
  }
  return p;
}

// Requests the experts once and checks each one's bytes against the shard's pattern.
void expect_whole(StreamingExpertStore& store, const Placed& p, const std::vector<int32_t>& ids) {
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

void expect_all_whole(StreamingExpertStore& store, const Placed& p) {
  std::vector<int32_t> ids;
  for (size_t e = 0; e < p.catalog.layers[0].spans.size(); ++e)
    ids.push_back(static_cast<int32_t>(e));
  expect_whole(store, p, ids);
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
  const SecondDrive second("deltafin-placement-test");  // both drives start at the same rate
  if (second.path.empty()) GTEST_SKIP() << "/dev/shm is not a separate writable device here";
  const std::string& shm = second.path;
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
}

TEST(StripedStore, ReadsEveryExpertFromItsPiecesAndNeverTheShard) {
  const Placed p = make_striped(scratch() + "/stripe-ok", 8, {1, 2, 1});
  // A shard read would fail: every expert must come whole from its pieces.
  auto q = std::make_unique<FailingQueue>(4, std::vector<std::string>{"shard.bin"});
  FailingQueue* failing = q.get();
  StreamingStoreOptions o = options_with(p.placement);
  o.allow_direct = true;  // pieces land at aligned offsets of the slot, the last one short
  StreamingExpertStore store(p.catalog, std::make_shared<io::ReadScheduler>(std::move(q), 4), o);
  expect_all_whole(store, p);
  EXPECT_EQ(failing->failures.load(), 0);
}

TEST(StripedStore, AMissingOrShortPieceSendsItsExpertsToTheShard) {
  for (const bool missing : {true, false}) {
    Placed p = make_striped(scratch() + "/stripe-damaged", 8, {1, 1, 1});
    const StripePiece& piece = p.placement->layers[0][3].pieces[1];
    const std::string path = piece_file(p.placement->dirs[piece.dir], 0, 3, piece.offset);
    if (missing) {
      fs::remove(path);
    } else {
      fs::resize_file(path, 100);
    }
    StreamingExpertStore store(p.catalog, std::make_shared<io::ReadScheduler>(4),
                               options_with(p.placement));
    expect_all_whole(store, p);
  }
}

TEST(StripedStore, ADriveWhoseReadsFailSendsTheWholeExpertToTheShard) {
  const Placed p = make_striped(scratch() + "/stripe-eio", 16, {1, 1, 1});
  auto q = std::make_unique<FailingQueue>(4, std::vector<std::string>{"/drive1/"});
  FailingQueue* failing = q.get();
  StreamingExpertStore store(p.catalog, std::make_shared<io::ReadScheduler>(std::move(q), 4),
                             options_with(p.placement));
  expect_whole(store, p, {0, 1, 2, 3, 4, 5, 6, 7});
  const int failures = failing->failures.load();
  EXPECT_GE(failures, 1);
  // The folder is failed: later reads never touch it.
  expect_whole(store, p, {8, 9, 10, 11, 12, 13, 14, 15});
  EXPECT_EQ(failing->failures.load(), failures);
}

TEST(StripedStore, GuessesStoppedMidStripeAreReadWholeWhenAsked) {
  // As AGuessStoppedPartWayFreesItsSlotAndIsReadWholeWhenAsked, with each guess striped over two
  // folders in 4 KiB requests: a cancel finds some pieces dropped, some in flight, some landed.
  // The guesses' first piece is held in flight (the gate) until the route has been asked for, so
  // the guesses cannot all land first on a loaded machine.
  const Placed p = make_striped(scratch() + "/stripe-stop", 64, {1, 1});
  auto queue = std::make_unique<GatedQueue>(1);
  GatedQueue* gate = queue.get();
  auto sched = std::make_shared<io::ReadScheduler>(std::move(queue), 1);
  StreamingStoreOptions o = options_with(p.placement);
  o.n_slots = 6;
  o.max_prefetch_slots = 3;
  o.min_prefetch_recall = 0;
  o.read_piece_bytes = 4096;
  StreamingExpertStore store(p.catalog, sched, o);
  const auto drain_whole = [&](auto batch) {  // a request's batch: every expert whole
    for (size_t i = 0; i < batch->size(); ++i) {
      const ReadyExpert r = batch->acquire_next();
      const format::ExpertSpan& span = p.catalog.layers[0].spans[r.expert];
      EXPECT_EQ(io::testing::first_mismatch(r.weights.gate.data, span.offset, span.nbytes), -1)
          << "expert " << r.expert;
      batch->release(r.index);
    }
  };
  for (int pass = 0; pass < 16; ++pass) {
    const int32_t g = 4 * pass;
    const uint64_t before = sched->stats().requests;
    gate->set_open(false);
    store.prefetch(0, std::vector<int32_t>{g, g + 1, g + 2});
    for (int i = 0; i < 50000 && sched->stats().requests == before; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    ASSERT_GT(sched->stats().requests, before) << "pass " << pass << ": no guess was issued";
    auto batch = store.request(0, std::vector<int32_t>{g + 3});  // stops the guesses
    gate->set_open(true);
    drain_whole(std::move(batch));
  }
  const ExpertStoreStats s = store.stats();
  // Every pass: the guess with a piece in flight stops there, the other two are dropped unread.
  EXPECT_EQ(s.prefetch_stopped, 16u);
  EXPECT_EQ(s.prefetch_cancelled, 32u);
  for (int pass = 0; pass < 16; ++pass)
    drain_whole(store.request(0, std::vector<int32_t>{4 * pass, 4 * pass + 1, 4 * pass + 2}));
  EXPECT_EQ(store.stats().demand_reads, s.demand_reads + 48);
}

// Each drive is charged the bytes of its own pieces, and striped guesses take the whole prefetch
// allowance (they read from every drive). Needs a second device: /dev/shm (tmpfs) when it is one.
TEST(StripedStore, EachDriveIsChargedItsPiecesAndGuessesShareTheAllowance) {
  const SecondDrive second("deltafin-stripe-test");
  if (second.path.empty()) GTEST_SKIP() << "/dev/shm is not a separate writable device here";
  const std::string& shm = second.path;
  Placed p = make_striped(scratch() + "/stripe-drives", 8, {1, 3});
  uint64_t want[2] = {};
  for (int e = 0; e < 8; ++e) {
    for (const StripePiece& piece : p.placement->layers[0][e].pieces) {
      want[piece.dir] += piece.nbytes;
      if (piece.dir == 1)
        fs::copy_file(piece_file(p.placement->dirs[1], 0, e, piece.offset),
                      piece_file(shm, 0, e, piece.offset));
    }
  }
  p.placement->dirs[1] = shm;
  StreamingStoreOptions o = options_with(p.placement);
  o.max_prefetch_slots = 4;
  auto sched = std::make_shared<io::ReadScheduler>(4);
  StreamingExpertStore store(p.catalog, sched, o);
  const std::vector<int32_t> guess = {0, 1, 2, 3, 4, 5, 6, 7};
  store.prefetch(0, guess);
  EXPECT_EQ(store.stats().prefetch_reads, 4u);
  expect_all_whole(store, p);
  const int disk = sched->drives().drive_of_path(p.placement->dirs[0]);
  const int tmpfs = sched->drives().drive_of_path(shm);
  EXPECT_EQ(sched->drives().stats(disk).bytes, want[0]);
  EXPECT_EQ(sched->drives().stats(tmpfs).bytes, want[1]);
  EXPECT_GT(sched->drives().stats(tmpfs).busy_seconds, 0);
}

}  // namespace
}  // namespace deltafin::experts
