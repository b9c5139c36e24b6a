// The GPU expert cache's decisions, made on the host before any copy: which VRAM slot holds which
// routed expert (layer, expert), the hits and misses of a whole route, and which slot a miss
// evicts (fewest requests since load, then least recently used: the CPU store's LFU rule).
// Also the order a route's experts run in (run_route), with the host memory the misses come from
// (ExpertSource: the mapping, or the RAM tier filled by O_DIRECT reads) and the device copies and
// products behind interfaces; and the streamed spine's host side (FillRing: pinned buffers a
// worker fills ahead of the pass) and the host copies' threads (parallel_copy). Plain C++17 with
// no CUDA call, so all of it is tested without a GPU.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/gpu_model.h"

namespace deltafin::cuda {

// The VRAM bytes of a MoE layer's table of `count` resident experts (gate, up and down each), the
// table from which a decode row's products are set up on the device; a whole-model plan counts
// it with the experts, an expert cache has none.
uint64_t expert_table_bytes(int64_t count);

struct DevGlu;  // gpu_internal.h

class ExpertSlotIndex {
 public:
  ExpertSlotIndex(int64_t n_slots, int64_t n_layers, int64_t n_experts);

  int64_t n_slots() const { return static_cast<int64_t>(slots_.size()); }
  // Counts one request of each of `experts` (distinct ids of one layer's route) and returns, per
  // expert, the slot that already holds it (pinned until release()) or -1 for a miss. Nothing
  // is evicted here: every hit of the route is known before a miss takes a slot.
  std::vector<int64_t> lookup(int64_t layer, const std::vector<int32_t>& experts);
  // Whether a miss can take a slot now (an empty one, or one not pinned).
  bool has_free() const;
  // The slot miss (layer, expert) is copied into: an empty slot, else the unpinned one with the
  // fewest requests, then the least recently used. Pinned. -1 when every slot is pinned.
  int64_t take(int64_t layer, int32_t expert);
  // The pass no longer needs the slot's expert (its products are issued): it may be evicted.
  void release(int64_t slot);
  // The slot holding (layer, expert), or -1.
  int64_t slot_of(int64_t layer, int32_t expert) const;

 private:
  struct Slot {
    int64_t key = -1;  // layer · n_experts + expert; -1: empty
    int pins = 0;
    uint64_t last_use = 0;
  };
  bool evict_before(const Slot& a, const Slot& b) const;

  int64_t n_experts_;
  std::vector<Slot> slots_;
  std::vector<int64_t> where_;  // by key: the slot, or -1
  std::vector<uint32_t> uses_;  // by key: requests since load
  uint64_t tick_ = 0;
};

// A ring of host buffers that a worker thread fills with items (the streamed spine's layers) a
// little ahead of the consumer, in the consumer's cyclic order 0, 1, ..., n-1, 0, ... A buffer is
// refilled only after the consumer's copy out of it finished (wait_copied, on the worker). An
// item asked for out of that order (a pass after a cancelled one) drops what was read ahead.
class FillRing {
 public:
  // fill(item, dst) writes item into a buffer (on the worker; may throw std::exception, which
  // acquire() then rethrows as std::runtime_error). wait_copied(buffer) blocks until the copy
  // out of the buffer that copying() announced has finished.
  using Fill = std::function<void(int64_t item, uint8_t* dst)>;
  using WaitCopied = std::function<void(int buffer)>;
  FillRing(std::vector<uint8_t*> buffers, int64_t n_items, Fill fill, WaitCopied wait_copied);
  ~FillRing();  // stops the worker (a fill in progress finishes first)
  FillRing(const FillRing&) = delete;
  FillRing& operator=(const FillRing&) = delete;
  // Blocks until item j is in a buffer and returns the buffer; adds the time waited.
  int acquire(int64_t j, double* waited_seconds);
  // The consumer issued its copy out of `buffer` (holding item j): the buffer is refilled once
  // wait_copied(buffer) returns; the items after j are read ahead into the rest of the ring.
  void copying(int buffer, int64_t j);
  uint8_t* buffer(int b) const { return buffers_[b]; }

 private:
  enum class State { kFree, kFilling, kFilled, kCopying };
  void loop();
  void want(int64_t j);          // caller holds mu_
  int holding(int64_t j) const;  // filling or filled with j, or -1; caller holds mu_

  std::vector<uint8_t*> buffers_;
  int64_t n_;
  Fill fill_;
  WaitCopied wait_copied_;
  std::vector<State> state_;
  std::vector<int64_t> item_;
  std::vector<uint64_t> order_;  // when its copy was announced (the oldest is reused first)
  uint64_t copies_ = 0, generation_ = 0;
  std::deque<int64_t> wanted_;
  std::string error_;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

// One expert in host memory the device copies from at the pinned rate: its index in the list
// given to ExpertSource::request and its three matrices' views there.
struct HostExpert {
  size_t index = 0;
  GpuGlu views;
};

// Where the VRAM cache's misses come from. request() announces a route's misses (reads may start
// at once, on threads of the source's own); next() hands each out once, in the order they are
// ready; release() says the device's copy out of it is done, so the memory may be reused.
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual void request(int64_t layer, const std::vector<int32_t>& experts) = 0;
  // Blocks until one more requested expert is in host memory.
  virtual HostExpert next() = 0;
  virtual void release(size_t index) = 0;
  // How many experts may be handed out and not yet released; the caller releases (after their
  // copies) before asking for more, so the source never waits on memory the caller holds.
  virtual int max_held() const = 0;
  virtual ExpertSourceStats stats() const = 0;
};

// The device side of a route: copies into VRAM slots and the experts' products, each ordered on
// the device by events (a copy waits for the slot's last reader, a product for its slot's copy).
class ExpertDevice {
 public:
  virtual ~ExpertDevice() = default;
  // Copies `host` into `slot` (place_expert's layout); returns a ticket for wait_copied().
  virtual uint64_t copy(int64_t slot, const GpuGlu& host) = 0;
  // Blocks the host until that copy finished reading the host memory.
  virtual void wait_copied(uint64_t ticket) = 0;
  // Expert i of the route, held by `slot`: its products, after the slot's copy when `copied`.
  virtual void compute(int64_t slot, size_t i, bool copied) = 0;
  // The route's hits, (slot, i) each, whose weights are in VRAM already: their products, which a
  // device may launch together. By default one compute() each, in order.
  virtual void compute_hits(const std::vector<std::pair<int64_t, size_t>>& hits) {
    for (const auto& [slot, i] : hits) compute(slot, i, false);
  }
};

// One host-to-device copy of an expert's bytes.
struct CopyPiece {
  const uint8_t* src;
  uint8_t* dst;
  uint64_t bytes;
};
// The copies that put `host` into a slot whose views are `slot` (place_expert's layout of the
// same shapes): each matrix's codes then scales, pieces adjacent in both memories merged (K3: one
// copy per matrix, codes and scales together).
std::vector<CopyPiece> expert_copy_pieces(const GpuGlu& host, const DevGlu& slot);

// Makes the copies (host memory to host memory) with `threads` threads, each a contiguous share
// of the bytes: one thread's memcpy out of the page cache is several times slower than the link.
void parallel_copy(const std::vector<CopyPiece>& pieces, int threads);
// Threads the host copies into pinned memory use (the spine ring's fills, mapped experts).
inline constexpr int kHostCopyThreads = 4;

// What one route did, added to the caller's counters.
struct RouteCounts {
  uint64_t hits = 0, misses = 0, hit_bytes = 0, miss_bytes = 0;
};

// Runs layer's route `experts` (distinct ids): every hit and miss decided before any copy, the
// misses requested from `source` at once (their reads start), the hits computed, then each miss
// as the source hands it out: a slot taken (a slot freed by an expert already issued when the
// route is larger than the cache), its copy issued, its products issued after the copy. At most
// source.max_held() experts are held unreleased; all are released (after their copies) before
// it returns. slot_bytes(e): expert e's VRAM bytes.
RouteCounts run_route(ExpertSlotIndex& index, ExpertSource* source, ExpertDevice& device,
                      int64_t layer, const std::vector<int32_t>& experts,
                      const std::vector<uint64_t>& expert_bytes);

}  // namespace deltafin::cuda
