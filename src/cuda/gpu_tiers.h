// The GPU expert cache's decisions, made on the host before any copy: which VRAM slot holds which
// routed expert (layer, expert), the hits and misses of a whole route, and which slot a miss
// evicts (fewest requests since load, then least recently used: the CPU store's LFU rule).
// Plain C++17 with no CUDA call, so the decisions are tested without a GPU.
#pragma once

#include <cstdint>
#include <vector>

namespace deltafin::cuda {

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

}  // namespace deltafin::cuda
