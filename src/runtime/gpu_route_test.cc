// The GPU expert cache's route order on the host, without a GPU: run_route with a fake device
// whose copies are deferred as a stream's would be (run when a product or the host waits for
// them), over an in-memory source that poisons what is released and over the disk path (the CPU's
// streaming store, O_DIRECT reads into its RAM tier), tiny VRAM and RAM tiers. Every product
// must see its expert's exact bytes; hits, misses, RAM hits and disk reads are counted.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if DELTAFIN_WITH_CUDA
#include "cuda/gpu_internal.h"
#include "cuda/gpu_tiers.h"
#include "experts/streaming_expert_store.h"
#include "io/test_files.h"
#include "runtime/gpu_bind.h"

namespace deltafin::runtime {
namespace {

using cuda::CopyPiece;
using cuda::DevGlu;
using cuda::GpuGlu;
using cuda::HostMatrix;

// VRAM slots in host memory; copies queued in order and run when waited for.
class FakeDevice : public cuda::ExpertDevice {
 public:
  FakeDevice(int64_t n_slots, uint64_t slot_bytes)
      : slot_bytes_(slot_bytes), slab_(n_slots * slot_bytes), views_(n_slots) {}
  // The expected host bytes of (layer, expert), checked by every product.
  std::function<GpuGlu(size_t i)> expected;
  std::vector<int32_t> computed;  // route indices in product order
  int max_queued = 0;

  uint64_t copy(int64_t slot, const GpuGlu& host) override {
    cuda::Arena view;
    view.base = slab_.data() + slot * slot_bytes_;
    view.fill = cuda::Arena::Fill::kNone;
    views_[slot] = cuda::place_expert(view, host);
    EXPECT_LE(view.used, slot_bytes_);
    for (const CopyPiece& p : cuda::expert_copy_pieces(host, views_[slot]))
      queue_.push_back({tickets_, p});
    max_queued = std::max<int>(max_queued, static_cast<int>(queue_.size()));
    return tickets_++;
  }
  void wait_copied(uint64_t ticket) override { run_until(ticket); }
  void compute(int64_t slot, size_t i, bool copied) override {
    if (copied) run_until(slot_ticket(slot));
    const GpuGlu want = expected(i);
    const DevGlu& got = views_[slot];
    EXPECT_TRUE(same(want.gate, got.gate) && same(want.up, got.up) && same(want.down, got.down))
        << "route index " << i << " in slot " << slot;
    computed.push_back(static_cast<int32_t>(i));
  }

 private:
  struct Queued {
    uint64_t ticket;
    CopyPiece piece;
  };
  uint64_t slot_ticket(int64_t slot) const {
    uint64_t t = 0;
    for (const Queued& q : queue_)
      if (q.piece.dst >= slab_.data() + slot * slot_bytes_ &&
          q.piece.dst < slab_.data() + (slot + 1) * slot_bytes_)
        t = std::max(t, q.ticket);
    return t;
  }
  void run_until(uint64_t ticket) {
    while (!queue_.empty() && queue_.front().ticket <= ticket) {
      const CopyPiece& p = queue_.front().piece;
      std::memcpy(p.dst, p.src, p.bytes);
      queue_.erase(queue_.begin());
    }
  }
  static bool same(const HostMatrix& h, const cuda::DevMatrix& d) {
    if (h.dtype == HostMatrix::DType::kMxfp4)
      return std::memcmp(h.data, d.mx.packed, h.rows * h.cols / 2) == 0 &&
             std::memcmp(h.scales, d.mx.scales, h.rows * h.cols / 32) == 0;
    return std::memcmp(h.data, d.bf16.data, h.rows * h.cols * 2) == 0;
  }
  uint64_t slot_bytes_;
  std::vector<uint8_t> slab_;
  std::vector<DevGlu> views_;
  std::vector<Queued> queue_;
  uint64_t tickets_ = 0;
};

// Experts in host memory; a released buffer is poisoned, so a copy that ran after its release
// shows in the product's bytes.
class MemorySource : public cuda::ExpertSource {
 public:
  MemorySource(std::vector<std::vector<GpuGlu>> experts, int max_held)
      : experts_(std::move(experts)), max_held_(max_held) {}
  void request(int64_t layer, const std::vector<int32_t>& ids) override {
    layer_ = layer;
    ids_ = ids;
    next_ = 0;
    copies_.assign(ids.size(), {});
  }
  cuda::HostExpert next() override {
    // Hand out in reverse: the caller must not assume the request's order.
    const size_t i = ids_.size() - 1 - next_++;
    EXPECT_LT(++held_, max_held_ + 1);
    const GpuGlu& e = experts_[layer_][ids_[i]];
    std::vector<uint8_t>& c = copies_[i];
    GpuGlu v = e;
    for (HostMatrix* m : {&v.gate, &v.up, &v.down}) {
      const uint64_t data =
          m->dtype == HostMatrix::DType::kMxfp4 ? m->rows * m->cols / 2 : m->rows * m->cols * 2;
      const uint64_t scales = m->dtype == HostMatrix::DType::kMxfp4 ? m->rows * m->cols / 32 : 0;
      c.insert(c.end(), m->data, m->data + data);
      if (scales) c.insert(c.end(), m->scales, m->scales + scales);
    }
    // Views into the copy (after every insert: the vector no longer moves).
    size_t at = 0;
    for (HostMatrix* m : {&v.gate, &v.up, &v.down}) {
      const uint64_t data =
          m->dtype == HostMatrix::DType::kMxfp4 ? m->rows * m->cols / 2 : m->rows * m->cols * 2;
      m->data = c.data() + at;
      at += data;
      if (m->dtype == HostMatrix::DType::kMxfp4) {
        m->scales = c.data() + at;
        at += m->rows * m->cols / 32;
      }
    }
    ++ram_hits_;
    return {i, v};
  }
  void release(size_t index) override {
    std::memset(copies_[index].data(), 0xEE, copies_[index].size());
    --held_;
  }
  int max_held() const override { return max_held_; }
  cuda::ExpertSourceStats stats() const override {
    cuda::ExpertSourceStats s;
    s.ram_hits = ram_hits_;
    return s;
  }
  int held() const { return held_; }

 private:
  std::vector<std::vector<GpuGlu>> experts_;
  int max_held_;
  int64_t layer_ = 0;
  std::vector<int32_t> ids_;
  size_t next_ = 0;
  std::vector<std::vector<uint8_t>> copies_;
  int held_ = 0;
  uint64_t ram_hits_ = 0;
};

std::vector<uint64_t> bytes_of(const std::vector<GpuGlu>& experts) {
  std::vector<uint64_t> out;
  for (const GpuGlu& e : experts) {
    cuda::Arena a;
    cuda::place_expert(a, e);
    out.push_back(a.used);
  }
  return out;
}

TEST(GpuRoute, HitsMissesAndWavesSeeExactBytes) {
  // 3 layers of 6 MXFP4 experts (gate/up [64, 96], down [96, 64]) with distinct bytes.
  std::vector<std::vector<uint8_t>> storage;
  std::vector<std::vector<GpuGlu>> experts(3);
  uint64_t seed = 1;
  const auto matrix = [&](int64_t rows, int64_t cols) {
    storage.emplace_back(rows * cols / 2 + rows * cols / 32);
    for (uint8_t& b : storage.back())
      b = static_cast<uint8_t>((seed = seed * 6364136223846793005u + 1) >> 56);
    return HostMatrix{HostMatrix::DType::kMxfp4, storage.back().data(),
                      storage.back().data() + rows * cols / 2, rows, cols};
  };
  storage.reserve(3 * 6 * 3);
  for (int l = 1; l < 3; ++l)
    for (int e = 0; e < 6; ++e)
      experts[l].push_back({matrix(64, 96), matrix(64, 96), matrix(96, 64)});
  const std::vector<uint64_t> bytes = bytes_of(experts[1]);
  for (int64_t n_slots : {1, 2, 4, 12}) {
    cuda::ExpertSlotIndex index(n_slots, 3, 6);
    MemorySource source(experts, 2);
    FakeDevice device(n_slots, bytes[0]);
    uint64_t hits = 0, misses = 0;
    const std::vector<std::pair<int, std::vector<int32_t>>> routes = {
        {1, {0, 1, 2}}, {1, {2, 1, 5}}, {2, {0, 1, 2, 3, 4, 5}}, {1, {5, 2}}, {2, {3}}};
    for (const auto& [layer, ids] : routes) {
      device.expected = [&, layer = layer, ids = ids](size_t i) { return experts[layer][ids[i]]; };
      device.computed.clear();
      const cuda::RouteCounts n = cuda::run_route(index, &source, device, layer, ids, bytes);
      EXPECT_EQ(device.computed.size(), ids.size());
      EXPECT_EQ(n.hits + n.misses, ids.size());
      EXPECT_EQ(n.miss_bytes, n.misses * bytes[0]);
      EXPECT_EQ(source.held(), 0) << "every held expert released";
      hits += n.hits;
      misses += n.misses;
    }
    EXPECT_EQ(source.stats().ram_hits, misses);
    if (n_slots == 12) {
      EXPECT_EQ(misses, 10u);  // each distinct (layer, expert) once
      EXPECT_EQ(hits, 5u);
    }
    if (n_slots == 1) {
      EXPECT_EQ(hits, 0u);
    }
  }
}

TEST(GpuRoute, ExpertCopiesMergeAdjacentPieces) {
  std::vector<uint8_t> host(64 * 96 * 3 / 2 + 64 * 96 * 3 / 32 + 4096);
  // gate codes+scales contiguous, then down, then up (the shard's order).
  uint8_t* p = host.data();
  const auto take = [&](uint64_t n) {
    uint8_t* q = p;
    p += n;
    return q;
  };
  GpuGlu e;
  e.gate = {HostMatrix::DType::kMxfp4, nullptr, nullptr, 64, 96};
  e.gate.data = take(64 * 96 / 2);
  e.gate.scales = take(64 * 96 / 32);
  e.down = {HostMatrix::DType::kMxfp4, nullptr, nullptr, 96, 64};
  e.down.data = take(96 * 64 / 2);
  e.down.scales = take(96 * 64 / 32);
  e.up = {HostMatrix::DType::kMxfp4, nullptr, nullptr, 64, 96};
  e.up.data = take(64 * 96 / 2);
  e.up.scales = take(64 * 96 / 32);
  std::vector<uint8_t> slot(1 << 16);
  cuda::Arena view;
  view.base = slot.data();
  view.fill = cuda::Arena::Fill::kNone;
  const DevGlu d = cuda::place_expert(view, e);
  const std::vector<CopyPiece> pieces = cuda::expert_copy_pieces(e, d);
  // 3072 codes + 192 scales: the scales start 256-aligned right after the codes in the slot, so
  // each matrix is one copy; up and down swap places, so three copies in all.
  ASSERT_EQ(pieces.size(), 3u);
  uint64_t total = 0;
  for (const CopyPiece& c : pieces) total += c.bytes;
  EXPECT_EQ(total, 3u * (64 * 96 / 2 + 64 * 96 / 32));
}

// The disk path: the CPU's streaming store (3 RAM slots for 8 experts) reads each miss from the
// file; the VRAM cache has 2 slots; every product sees the file's bytes.
TEST(GpuRoute, DiskMissesThroughTheRamTier) {
  const int n = 8;
  experts::ExpertLayout lay;
  uint64_t off = 0;
  for (experts::ExpertMatrixLayout* m : {&lay.gate, &lay.down, &lay.up}) {
    const bool down = m == &lay.down;
    const int64_t rows = down ? 64 : 32, cols = down ? 32 : 64;
    *m = {kernels::WeightDType::kBF16, off, 0, rows, cols};
    off += rows * cols * 2;
  }
  lay.span_bytes = off;
  const uint64_t start = 1234;  // no span 4096-aligned
  const std::string dir = std::string(DELTAFIN_BINARY_DIR) + "/gpu_route_test_tmp";
  const std::string path = io::testing::write_pattern_file(dir, "bank", start + n * off + 100);
  experts::ExpertCatalog catalog;
  catalog.layers.resize(2);
  catalog.layers[1].layout = lay;
  for (int e = 0; e < n; ++e) catalog.layers[1].spans.push_back({1, e, path, start + e * off, off});
  // The expected bytes: the file's pattern, viewed in place.
  std::vector<uint8_t> file(start + n * off + 100);
  for (size_t i = 0; i < file.size(); ++i) file[i] = io::testing::pattern_byte(i);
  const auto expected = [&](int32_t e) {
    const experts::ExpertWeights w = experts::view_expert(lay, file.data() + start + e * off);
    const auto h = [](const kernels::WeightMatrix& m) {
      return HostMatrix{HostMatrix::DType::kBf16, m.data, nullptr, m.rows, m.cols};
    };
    return GpuGlu{h(w.gate), h(w.up), h(w.down)};
  };
  std::vector<GpuGlu> shapes;
  for (int e = 0; e < n; ++e) shapes.push_back(expected(e));
  const std::vector<uint64_t> bytes = bytes_of(shapes);

  experts::StreamingStoreOptions so;
  so.n_slots = 3;
  auto store = std::make_unique<experts::StreamingExpertStore>(
      catalog, std::make_shared<io::ReadScheduler>(4), so);
  const experts::StreamingExpertStore* raw = store.get();
  std::unique_ptr<cuda::ExpertSource> source = store_expert_source(std::move(store), off, false);
  EXPECT_EQ(source->max_held(), 2);
  cuda::ExpertSlotIndex index(2, 2, n);
  FakeDevice device(2, bytes[0]);
  const std::vector<std::vector<int32_t>> routes = {{0, 1, 2, 3}, {3, 1}, {7, 6, 5, 4, 0}, {0}};
  uint64_t misses = 0;
  for (const std::vector<int32_t>& ids : routes) {
    device.expected = [&](size_t i) { return expected(ids[i]); };
    device.computed.clear();
    const cuda::RouteCounts c = cuda::run_route(index, source.get(), device, 1, ids, bytes);
    EXPECT_EQ(device.computed.size(), ids.size());
    misses += c.misses;
  }
  const cuda::ExpertSourceStats s = source->stats();
  EXPECT_EQ(s.ram_hits + s.disk_reads, misses);
  EXPECT_GT(s.disk_reads, 0u);
  EXPECT_EQ(s.disk_bytes, raw->stats().bytes_read);
  EXPECT_GE(s.disk_bytes, s.disk_reads * off);
}

// The streamed spine's host ring: each item arrives whole in the consumer's order, a buffer is
// refilled only after the consumer's (deferred) copy out of it finished, an item out of order (a
// pass after a cancelled one) is served, and a failing fill is reported to the consumer.
TEST(GpuRoute, SpineRingFillsAheadAndNeverOverwritesACopyInFlight) {
  for (int n_buffers : {1, 2, 3}) {
    for (int64_t n_items : {1, 2, 5}) {
      constexpr size_t kBytes = 4096;
      std::vector<std::vector<uint8_t>> memory(n_buffers, std::vector<uint8_t>(kBytes));
      std::vector<uint8_t*> buffers;
      for (auto& m : memory) buffers.push_back(m.data());
      // Copies announced but not yet done: the consumer does each one a step later.
      std::mutex mu;
      std::condition_variable cv;
      std::vector<bool> in_flight(n_buffers, false);
      cuda::FillRing ring(
          buffers, n_items,
          [&](int64_t j, uint8_t* dst) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            std::memset(dst, static_cast<int>(j + 1), kBytes);
          },
          [&](int b) {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] { return !in_flight[b]; });
          });
      // The device: runs each announced copy a little later, in order, checking the bytes.
      std::deque<std::pair<int, int64_t>> copies;
      bool done = false;
      std::thread device([&] {
        std::unique_lock<std::mutex> lock(mu);
        for (;;) {
          cv.wait(lock, [&] { return done || !copies.empty(); });
          if (copies.empty()) return;
          const auto [b, j] = copies.front();
          lock.unlock();
          std::this_thread::sleep_for(std::chrono::microseconds(300));
          const std::vector<uint8_t> want(kBytes, static_cast<uint8_t>(j + 1));
          EXPECT_EQ(std::memcmp(ring.buffer(b), want.data(), kBytes), 0)
              << "item " << j << " overwritten before its copy finished";
          lock.lock();
          copies.pop_front();
          in_flight[b] = false;
          cv.notify_all();
        }
      });
      double waited = 0;
      const auto take = [&](int64_t j) {
        const int b = ring.acquire(j, &waited);
        const std::vector<uint8_t> want(kBytes, static_cast<uint8_t>(j + 1));
        EXPECT_EQ(std::memcmp(ring.buffer(b), want.data(), kBytes), 0) << "item " << j;
        {
          std::lock_guard<std::mutex> lock(mu);
          in_flight[b] = true;
          copies.push_back({b, j});
          cv.notify_all();
        }
        ring.copying(b, j);
      };
      for (int pass = 0; pass < 4; ++pass)
        for (int64_t j = 0; j < n_items; ++j) take(j);
      // A cancelled pass: stops after its first item, the next starts again at 0.
      take(0);
      for (int64_t j = 0; j < n_items; ++j) take(j);
      {
        std::lock_guard<std::mutex> lock(mu);
        done = true;
        cv.notify_all();
      }
      device.join();
      // (the ring's destructor stops the worker before the device's bookkeeping goes)
    }
  }
}

TEST(GpuRoute, ParallelCopyCopiesEveryByteOnce) {
  for (uint64_t total :
       {uint64_t{0}, uint64_t{1000}, uint64_t{5} << 20, (uint64_t{9} << 20) + 77}) {
    std::vector<uint8_t> src(total), dst(total + 64, 0xAB);
    for (uint64_t i = 0; i < total; ++i) src[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
    // Pieces of uneven sizes, written to dst in another order (reversed).
    std::vector<CopyPiece> pieces;
    uint64_t at = 0, size = 1;
    while (at < total) {
      const uint64_t n = std::min(size, total - at);
      pieces.push_back({src.data() + at, dst.data() + (total - at - n), n});
      at += n;
      size = size * 3 + 1;
    }
    for (int threads : {1, 3, 4, 16}) {
      std::fill(dst.begin(), dst.end(), 0xAB);
      cuda::parallel_copy(pieces, threads);
      for (const CopyPiece& p : pieces)
        ASSERT_EQ(std::memcmp(p.dst, p.src, p.bytes), 0) << total << " bytes, " << threads;
      for (uint64_t i = total; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xAB);
    }
  }
}

TEST(GpuRoute, SpineRingReportsAFailedFill) {
  std::vector<uint8_t> a(64), b(64);
  cuda::FillRing ring(
      {a.data(), b.data()}, 4,
      [](int64_t j, uint8_t*) {
        if (j == 2) throw std::runtime_error("layer 2 unreadable");
      },
      [](int) {});
  double waited = 0;
  ring.copying(ring.acquire(0, &waited), 0);
  ring.copying(ring.acquire(1, &waited), 1);
  try {
    ring.acquire(2, &waited);
    ADD_FAILURE() << "a failed fill was handed out";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 2 unreadable"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deltafin::runtime
#endif
