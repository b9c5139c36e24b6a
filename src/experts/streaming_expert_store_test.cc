// The streaming store against files on a real disk: every expert arrives
// whole whatever its alignment, batches larger than the slot pool, cache hits, prefetch hits,
// cancelled and wasted predictions, the recall gate, read errors and NaN scales; and with a fake
// fetcher (a streaming install): delayed, failing and concurrent fetches, and guesses that stay
// off the network.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
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

using io::testing::pattern_byte;

std::string scratch() { return std::string(DELTAFIN_BINARY_DIR) + "/experts_test_tmp"; }

// Layer 1 holds n experts of `span` bytes each, starting at an odd offset of a pattern file so no
// span is 4096-aligned; BF16 matrices (no scale bytes) unless `mxfp4`.
struct Bank {
  std::string path;
  ExpertCatalog catalog;
  uint64_t span = 0;
};

Bank make_bank(const std::string& name, int n, bool mxfp4 = false, uint8_t bad_scale = 0) {
  Bank b;
  ExpertLayout lay;
  uint64_t off = 0;
  for (ExpertMatrixLayout* m : {&lay.gate, &lay.down, &lay.up}) {
    const bool down = m == &lay.down;
    const int64_t rows = down ? 64 : 32, cols = down ? 32 : 64;
    if (mxfp4) {
      *m = {kernels::WeightDType::kMxfp4, off, off + rows * cols / 2, rows, cols};
      off += rows * cols / 2 + rows * cols / 32;
    } else {
      *m = {kernels::WeightDType::kBF16, off, 0, rows, cols};
      off += rows * cols * 2;
    }
  }
  lay.span_bytes = b.span = off;
  const uint64_t start = 1234;
  const uint64_t size = start + n * off + 100;
  b.path = io::testing::write_pattern_file(scratch(), name, size);
  if (mxfp4) {  // valid scales everywhere; `bad_scale` != 0 plants a 255 in the last expert
    std::fstream f(b.path, std::ios::in | std::ios::out | std::ios::binary);
    for (int e = 0; e < n; ++e) {
      for (const ExpertMatrixLayout* m : {&lay.gate, &lay.down, &lay.up}) {
        std::string scales(m->rows * m->cols / 32, static_cast<char>(120));
        if (bad_scale && e == n - 1 && m == &lay.up) scales[3] = static_cast<char>(bad_scale);
        f.seekp(static_cast<std::streamoff>(start + e * off + m->scales_offset));
        f.write(scales.data(), static_cast<std::streamsize>(scales.size()));
      }
    }
  }
  b.catalog.layers.resize(3);
  for (int layer : {1, 2}) {
    b.catalog.layers[layer].layout = lay;
    for (int e = 0; e < n; ++e)
      b.catalog.layers[layer].spans.push_back({layer, e, b.path, start + e * off, off});
  }
  return b;
}

std::shared_ptr<ReadScheduler> scheduler(int depth = 4) {
  return std::make_shared<ReadScheduler>(depth);
}

// Takes every expert of the batch, checks its bytes against the file (the pattern, where the bank
// has no planted scales), returns the ids in hand-out order.
std::vector<int32_t> drain(ExpertBatch& batch, const Bank& b, int layer, bool pattern = true) {
  std::vector<int32_t> order;
  std::set<size_t> seen;
  for (size_t i = 0; i < batch.size(); ++i) {
    const ReadyExpert r = batch.acquire_next();
    EXPECT_TRUE(seen.insert(r.index).second);
    const format::ExpertSpan& span = b.catalog.layers[layer].spans[r.expert];
    if (pattern) {
      EXPECT_EQ(io::testing::first_mismatch(r.weights.gate.data, span.offset, span.nbytes), -1)
          << "expert " << r.expert;
    } else {
      EXPECT_EQ(r.weights.gate.scales[0], 120) << "expert " << r.expert;
    }
    EXPECT_EQ(r.weights.up.data,
              r.weights.gate.data + b.catalog.layers[layer].layout.up.data_offset);
    order.push_back(r.expert);
    batch.release(r.index);
  }
  return order;
}

TEST(StreamingExpertStore, DeliversEveryExpertWholeWithFewerSlotsThanRequested) {
  const Bank b = make_bank("bank1.bin", 9);
  StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 3});
  EXPECT_EQ(StreamingExpertStore::slot_bytes(b.catalog) % 4096, 0u);
  const std::vector<int32_t> ids = {7, 0, 3, 8, 1, 5};
  auto batch = store.request(1, ids);
  std::vector<int32_t> got = drain(*batch, b, 1);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 3, 5, 7, 8}));
  batch.reset();
  const ExpertStoreStats s = store.stats();
  EXPECT_EQ(s.experts_requested, 6u);
  EXPECT_EQ(s.demand_reads, 6u);
  EXPECT_EQ(s.cache_hits, 0u);
  // Needed counts whole aligned reads; the last expert's read stops early at EOF.
  EXPECT_LE(s.bytes_read, s.needed_bytes);
  EXPECT_GE(s.bytes_read, 6 * b.span);
}

TEST(StreamingExpertStore, ReleasedSlotsServeAsAnLruCache) {
  const Bank b = make_bank("bank2.bin", 6);
  StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 4, .policy = CachePolicy::kLru});
  const std::vector<int32_t> first = {0, 1, 2};
  drain(*store.request(1, first), b, 1);
  const uint64_t read_after_first = store.stats().bytes_read;
  drain(*store.request(1, first), b, 1);  // all three still cached
  ExpertStoreStats s = store.stats();
  EXPECT_EQ(s.cache_hits, 3u);
  EXPECT_EQ(s.bytes_read, read_after_first);
  EXPECT_EQ(s.needed_bytes, read_after_first);
  // Same ids on another layer are other experts.
  drain(*store.request(2, std::vector<int32_t>{0, 1}), b, 2);
  EXPECT_EQ(store.stats().demand_reads, 5u);
  // Layer 1 expert 0 was the least recently used and made room; 2 is still there.
  drain(*store.request(1, std::vector<int32_t>{2}), b, 1);
  EXPECT_EQ(store.stats().cache_hits, 4u);
  drain(*store.request(1, std::vector<int32_t>{0}), b, 1);
  EXPECT_EQ(store.stats().demand_reads, 6u);
}

// Expert 0 is requested often, 1 and 2 once, later: a new read replaces 0 under LRU, 1 under LFU.
TEST(StreamingExpertStore, LfuKeepsTheOftenRequestedExpert) {
  const Bank b = make_bank("bank2b.bin", 6);
  for (CachePolicy policy : {CachePolicy::kLfu, CachePolicy::kLru}) {
    StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 3, .policy = policy});
    for (int i = 0; i < 3; ++i) drain(*store.request(1, std::vector<int32_t>{0}), b, 1);
    drain(*store.request(1, std::vector<int32_t>{1}), b, 1);
    drain(*store.request(1, std::vector<int32_t>{2}), b, 1);
    drain(*store.request(1, std::vector<int32_t>{3}), b, 1);
    const uint64_t hits = store.stats().cache_hits;
    drain(*store.request(1, std::vector<int32_t>{0}), b, 1);
    EXPECT_EQ(store.stats().cache_hits - hits, policy == CachePolicy::kLfu ? 1u : 0u);
  }
}

TEST(StreamingExpertStore, PrefetchHitsCountAndPredictionsAreScored) {
  const Bank b = make_bank("bank3.bin", 8);
  StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 8, .max_prefetch_slots = 4});
  store.prefetch(1, std::vector<int32_t>{4, 5, 6});
  drain(*store.request(1, std::vector<int32_t>{5, 1}), b, 1);
  ExpertStoreStats s = store.stats();
  EXPECT_EQ(s.prefetch_reads, 3u);
  EXPECT_EQ(s.prefetch_hits, 1u);
  EXPECT_EQ(s.demand_reads, 1u);
  EXPECT_EQ(s.predicted_actual, 2u);
  EXPECT_EQ(s.predicted_matched, 1u);
  // 4 and 6 were read or cancelled, never requested: the bytes the route needed exclude them.
  auto read_length = [&](int e) {
    return io::align_span(b.catalog.layers[1].spans[e].offset, b.span).read_length;
  };
  EXPECT_EQ(s.needed_bytes, read_length(5) + read_length(1));
  // Filling the pool evicts the unused predictions: wasted, or cancelled before the device.
  drain(*store.request(2, std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}), b, 2);
  s = store.stats();
  EXPECT_EQ(s.prefetch_wasted + s.prefetch_cancelled, 2u);
}

// Waits (up to 5 s) until the store has read `bytes` in all: guesses then are past cancelling.
void wait_for_bytes_read(const StreamingExpertStore& store, uint64_t bytes) {
  for (int i = 0; i < 5000 && store.stats().bytes_read < bytes; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(store.stats().bytes_read, bytes);
}

TEST(StreamingExpertStore, MissedGuessesStopHoldingThePrefetchAllowance) {
  // Each pass guesses two experts of layer 1, both are read, and the route takes one. Once the
  // route is known, the missed guess is an ordinary cache entry: it must neither count against
  // the prefetch allowance (2 here) nor be kept before the experts routes really used.
  const Bank b = make_bank("bank3b.bin", 40);
  StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 12, .max_prefetch_slots = 2});
  const uint64_t read_length =
      io::align_span(b.catalog.layers[1].spans[0].offset, b.span).read_length;
  for (int pass = 0; pass < 10; ++pass) {
    const int32_t right = 2 * pass, wrong = 2 * pass + 1;
    store.prefetch(1, std::vector<int32_t>{right, wrong});
    wait_for_bytes_read(store, (2 * pass + 2) * read_length);
    drain(*store.request(1, std::vector<int32_t>{right}), b, 1);
  }
  ExpertStoreStats s = store.stats();
  EXPECT_EQ(s.prefetch_reads, 20u);  // every pass could guess: nothing stale held the allowance
  EXPECT_EQ(s.prefetch_cancelled, 0u);
  EXPECT_EQ(s.prefetch_hits, 10u);
  EXPECT_EQ(s.demand_reads, 0u);
  // A missed guess that a later route asks for was in memory before that route's pass began:
  // a cache hit, and not among the bytes the route needed from disk (its read counted in bytes
  // read, in the pass that guessed it, as a guess that pass did not use).
  drain(*store.request(1, std::vector<int32_t>{19}), b, 1);
  const ExpertStoreStats t = store.stats();
  EXPECT_EQ(t.prefetch_hits, s.prefetch_hits);
  EXPECT_EQ(t.cache_hits, s.cache_hits + 1);
  EXPECT_EQ(t.demand_reads, 0u);
  EXPECT_EQ(t.needed_bytes, s.needed_bytes);
  EXPECT_EQ(t.bytes_read, s.bytes_read);
}

TEST(StreamingExpertStore, AGuessStoppedPartWayFreesItsSlotAndIsReadWholeWhenAsked) {
  // Experts are read in 4 KiB pieces, one at a time. Each pass guesses three experts, waits until
  // the first piece is on the device, then routes elsewhere: the guess in flight stops after its
  // pieces in flight, the others are dropped. A later route for the guessed experts must read
  // them whole (a stopped slot must not stay mapped), and the pool must not leak its slots.
  const Bank b = make_bank("bank3c.bin", 64);
  auto sched = scheduler(1);
  StreamingExpertStore store(b.catalog, sched,
                             {.n_slots = 6,
                              .max_prefetch_slots = 3,
                              .min_prefetch_recall = 0,  // every guess misses: keep guessing
                              .read_piece_bytes = 4096});
  for (int pass = 0; pass < 16; ++pass) {
    const int32_t g = 4 * pass;
    const uint64_t before = sched->stats().requests;
    store.prefetch(1, std::vector<int32_t>{g, g + 1, g + 2});
    for (int i = 0; i < 5000 && sched->stats().requests == before; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    drain(*store.request(1, std::vector<int32_t>{g + 3}), b, 1);
  }
  const ExpertStoreStats s = store.stats();
  EXPECT_GT(s.prefetch_stopped, 0u);
  EXPECT_EQ(s.prefetch_hits, 0u);
  for (int pass = 0; pass < 16; ++pass) {
    const int32_t g = 4 * pass;
    drain(*store.request(1, std::vector<int32_t>{g, g + 1, g + 2}), b, 1);
  }
  EXPECT_EQ(store.stats().demand_reads, s.demand_reads + 48);
}

TEST(StreamingExpertStore, LowRecallClosesTheGateButKeepsScoring) {
  const Bank b = make_bank("bank4.bin", 8);
  StreamingExpertStore store(b.catalog, scheduler(),
                             {.n_slots = 8, .max_prefetch_slots = 4, .min_prefetch_recall = 0.5});
  for (int pass = 0; pass < 4; ++pass) {
    store.prefetch(1, std::vector<int32_t>{6, 7});
    drain(*store.request(1, std::vector<int32_t>{0, 1}), b, 1);
  }
  EXPECT_FALSE(store.prefetch_enabled(1));
  EXPECT_TRUE(store.prefetch_enabled(2));
  const uint64_t reads = store.stats().prefetch_reads;
  EXPECT_LT(reads, 8u);
  store.prefetch(1, std::vector<int32_t>{0, 1});  // gate closed: scored, not read
  EXPECT_EQ(store.stats().prefetch_reads, reads);
  drain(*store.request(1, std::vector<int32_t>{0, 1}), b, 1);
  EXPECT_EQ(store.stats().predicted_matched, 2u);
}

TEST(StreamingExpertStore, ReadPastEndOfFileNamesTheFile) {
  Bank b = make_bank("bank5.bin", 3);
  b.catalog.layers[1].spans[2].offset += 4 * b.span;  // beyond EOF
  StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 2});
  auto batch = store.request(1, std::vector<int32_t>{2});
  try {
    batch->acquire_next();
    FAIL() << "read past EOF accepted";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bank5.bin"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expert 2"), std::string::npos) << e.what();
  }
  batch.reset();
  drain(*store.request(1, std::vector<int32_t>{0, 1}), b, 1);  // the store still works
}

TEST(StreamingExpertStore, ChecksScalesOfEveryRead) {
  const Bank b = make_bank("bank6.bin", 3, /*mxfp4=*/true, /*bad_scale=*/255);
  StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 2});
  drain(*store.request(1, std::vector<int32_t>{0, 1}), b, 1, /*pattern=*/false);
  auto batch = store.request(1, std::vector<int32_t>{2});
  try {
    batch->acquire_next();
    FAIL() << "scale byte 255 accepted";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 expert 2"), std::string::npos) << e.what();
  }
}

TEST(StreamingExpertStore, BufferedFallbackReadsTheSameBytes) {
  const Bank b = make_bank("bank7.bin", 5);
  StreamingExpertStore store(b.catalog, scheduler(), {.n_slots = 2, .allow_direct = false});
  drain(*store.request(2, std::vector<int32_t>{4, 0, 2}), b, 2);
}

// A stand-in for setup's HTTP source: "fetching" copies an expert's span out of a bank file into
// its own cache file (temporary name, then rename, as the real one publishes), on a thread of its
// own after `delay_ms`. Experts in `failing` fail instead, with a message naming them.
class FakeFetcher : public ExpertFetcher {
 public:
  FakeFetcher(const Bank& bank, std::string cache_dir) : bank_(bank), dir_(std::move(cache_dir)) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~FakeFetcher() override {
    for (std::thread& t : threads_) t.join();
  }

  // The catalog a streaming store sees: every span is its own (maybe absent) file at offset 0.
  ExpertCatalog catalog() const {
    ExpertCatalog c = bank_.catalog;
    for (ExpertCatalog::Layer& l : c.layers) {
      for (format::ExpertSpan& s : l.spans)
        s = {s.layer, s.expert, path(s.layer, s.expert), 0, s.nbytes};
    }
    return c;
  }
  std::string path(int64_t layer, int64_t expert) const {
    return dir_ + "/L" + std::to_string(layer) + "E" + std::to_string(expert) + ".bin";
  }
  void make_local(int layer, int32_t expert) {
    const format::ExpertSpan& s = bank_.catalog.layers[layer].spans[expert];
    std::vector<char> bytes(s.nbytes);
    std::ifstream(bank_.path, std::ios::binary)
        .seekg(static_cast<std::streamoff>(s.offset))
        .read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const std::string p = path(layer, expert);
    std::ofstream(p + ".tmp", std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::filesystem::rename(p + ".tmp", p);
  }

  bool is_local(int layer, int32_t expert) const override {
    return std::filesystem::exists(path(layer, expert));
  }
  void fetch(int layer, int32_t expert, Done done) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_[{layer, expert}];
    const bool fails = failing.contains({layer, expert});
    threads_.emplace_back([this, layer, expert, fails, done = std::move(done)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      if (fails) {
        done("fetching layer " + std::to_string(layer) + " expert " + std::to_string(expert) +
             ": HTTP 503 after 2 attempts");
        return;
      }
      make_local(layer, expert);
      done("");
    });
  }
  int calls(int layer, int32_t expert) {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_[{layer, expert}];
  }
  int total_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& [k, v] : calls_) n += v;
    return n;
  }

  int delay_ms = 0;
  std::set<std::pair<int, int32_t>> failing;  // set before the fetches start

 private:
  const Bank& bank_;
  std::string dir_;
  std::mutex mu_;
  std::map<std::pair<int, int32_t>, int> calls_;
  std::vector<std::thread> threads_;
};

// Takes every expert of a batch over cache files and checks each against its span in the bank.
std::vector<int32_t> drain_cached(ExpertBatch& batch, const Bank& b, int layer) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < batch.size(); ++i) {
    const ReadyExpert r = batch.acquire_next();
    const format::ExpertSpan& span = b.catalog.layers[layer].spans[r.expert];
    EXPECT_EQ(io::testing::first_mismatch(r.weights.gate.data, span.offset, span.nbytes), -1)
        << "expert " << r.expert;
    order.push_back(r.expert);
    batch.release(r.index);
  }
  std::sort(order.begin(), order.end());
  return order;
}

TEST(StreamingExpertStoreFetch, DemandFetchesRemoteExpertsOnceAndReadsLocalOnes) {
  const Bank b = make_bank("fetch1.bin", 8);
  auto fetcher = std::make_shared<FakeFetcher>(b, scratch() + "/cache1");
  fetcher->make_local(1, 2);
  fetcher->delay_ms = 30;  // acquire_next must wait for the fetch, then the read
  // Files are opened per read: none exists yet, and the constructor must not need them.
  StreamingExpertStore store(fetcher->catalog(), scheduler(), {.n_slots = 3}, fetcher);
  EXPECT_EQ(drain_cached(*store.request(1, std::vector<int32_t>{5, 2, 0, 7}), b, 1),
            (std::vector<int32_t>{0, 2, 5, 7}));
  EXPECT_EQ(fetcher->calls(1, 2), 0);  // local: read, never fetched
  for (int32_t e : {0, 5, 7}) EXPECT_EQ(fetcher->calls(1, e), 1) << e;
  ExpertStoreStats s = store.stats();
  EXPECT_EQ(s.experts_fetched, 3u);
  EXPECT_EQ(s.demand_reads, 4u);
  // Evicted from the 3-slot pool but local now: read again, not fetched again.
  EXPECT_EQ(drain_cached(*store.request(1, std::vector<int32_t>{0, 5, 7, 2}), b, 1),
            (std::vector<int32_t>{0, 2, 5, 7}));
  EXPECT_EQ(fetcher->total_calls(), 3);
}

TEST(StreamingExpertStoreFetch, ConcurrentNeedsOfOneExpertShareOneFetch) {
  const Bank b = make_bank("fetch2.bin", 6);
  auto fetcher = std::make_shared<FakeFetcher>(b, scratch() + "/cache2");
  fetcher->delay_ms = 50;
  StreamingExpertStore store(fetcher->catalog(), scheduler(), {.n_slots = 8}, fetcher);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> users;
  for (int t = 0; t < 4; ++t) {
    users.emplace_back([&, t] {
      const int32_t other = t < 3 ? t : 5;
      got[t] = drain_cached(*store.request(1, std::vector<int32_t>{3, other}), b, 1);
    });
  }
  for (std::thread& u : users) u.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(std::count(got[t].begin(), got[t].end(), 3) == 1) << t;
  EXPECT_EQ(fetcher->calls(1, 3), 1);
  EXPECT_EQ(fetcher->total_calls(), 5);  // 3 once, and 0, 1, 2, 5
}

TEST(StreamingExpertStoreFetch, FailedFetchNamesTheExpertAndALaterRequestRetries) {
  const Bank b = make_bank("fetch3.bin", 4);
  auto fetcher = std::make_shared<FakeFetcher>(b, scratch() + "/cache3");
  fetcher->failing = {{2, 1}};
  fetcher->delay_ms = 10;
  StreamingExpertStore store(fetcher->catalog(), scheduler(), {.n_slots = 2}, fetcher);
  auto batch = store.request(2, std::vector<int32_t>{0, 1});
  try {
    for (int i = 0; i < 2; ++i) batch->release(batch->acquire_next().index);
    FAIL() << "a failed fetch was handed out";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 2 expert 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HTTP 503"), std::string::npos) << e.what();
  }
  batch.reset();
  EXPECT_FALSE(fetcher->is_local(2, 1));
  // The failure is not remembered: the next need fetches again, and succeeds once the cause is
  // gone.
  {
    std::vector<int32_t> one = {1};
    auto again = store.request(2, one);
    EXPECT_THROW(again->acquire_next(), base::Error);
  }
  EXPECT_EQ(fetcher->calls(2, 1), 2);
  fetcher->failing.clear();
  EXPECT_EQ(drain_cached(*store.request(2, std::vector<int32_t>{1, 0}), b, 2),
            (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(fetcher->calls(2, 1), 3);
}

TEST(StreamingExpertStoreFetch, GuessesNeverFetch) {
  const Bank b = make_bank("fetch4.bin", 6);
  auto fetcher = std::make_shared<FakeFetcher>(b, scratch() + "/cache4");
  fetcher->make_local(1, 4);
  StreamingExpertStore store(fetcher->catalog(), scheduler(), {.n_slots = 6}, fetcher);
  store.prefetch(1, std::vector<int32_t>{3, 4, 5});
  EXPECT_EQ(store.stats().prefetch_reads, 1u);  // only the local 4
  EXPECT_EQ(fetcher->total_calls(), 0);
  EXPECT_EQ(drain_cached(*store.request(1, std::vector<int32_t>{4, 5}), b, 1),
            (std::vector<int32_t>{4, 5}));
  const ExpertStoreStats s = store.stats();
  EXPECT_EQ(s.prefetch_hits, 1u);
  EXPECT_EQ(s.experts_fetched, 1u);
  EXPECT_EQ(fetcher->calls(1, 3), 0);
}

TEST(StreamingExpertStoreFetch, StoreGoneBeforeItsFetchCompletes) {
  const Bank b = make_bank("fetch5.bin", 4);
  auto fetcher = std::make_shared<FakeFetcher>(b, scratch() + "/cache5");
  fetcher->delay_ms = 100;
  {
    StreamingExpertStore store(fetcher->catalog(), scheduler(), {.n_slots = 2}, fetcher);
    auto batch = store.request(1, std::vector<int32_t>{0, 3});
  }  // batch and store gone while both fetches sleep: their callbacks must find nothing to touch
  fetcher.reset();  // joins the fetch threads
}

}  // namespace
}  // namespace deltafin::experts
