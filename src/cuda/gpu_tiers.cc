// The VRAM tiers on the host: the plan (working set, resident spine layers, streamed ones, the
// expert cache, the pinned host memory) counted by the same placement walk that allocates, the
// expert cache's slot decisions and route order, the spine's host ring and the host copies. No
// CUDA call, so all of it is tested without a GPU.
#include "cuda/gpu_tiers.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda/gpu_internal.h"

namespace deltafin::cuda {

ExpertSlotIndex::ExpertSlotIndex(int64_t n_slots, int64_t n_layers, int64_t n_experts)
    : n_experts_(n_experts),
      slots_(static_cast<size_t>(n_slots)),
      where_(static_cast<size_t>(n_layers * n_experts), -1),
      uses_(static_cast<size_t>(n_layers * n_experts), 0) {}

std::vector<int64_t> ExpertSlotIndex::lookup(int64_t layer, const std::vector<int32_t>& experts) {
  std::vector<int64_t> out;
  out.reserve(experts.size());
  for (int32_t e : experts) {
    const int64_t key = layer * n_experts_ + e;
    ++uses_[key];
    const int64_t s = where_[key];
    if (s >= 0) {
      ++slots_[s].pins;
      slots_[s].last_use = ++tick_;
    }
    out.push_back(s);
  }
  return out;
}

bool ExpertSlotIndex::has_free() const {
  for (const Slot& s : slots_)
    if (s.pins == 0) return true;
  return false;
}

bool ExpertSlotIndex::evict_before(const Slot& a, const Slot& b) const {
  const uint32_t ua = uses_[a.key], ub = uses_[b.key];
  if (ua != ub) return ua < ub;
  return a.last_use < b.last_use;
}

int64_t ExpertSlotIndex::take(int64_t layer, int32_t expert) {
  int64_t best = -1;
  for (int64_t i = 0; i < n_slots(); ++i) {
    const Slot& s = slots_[i];
    if (s.pins > 0) continue;
    if (s.key < 0) {
      best = i;
      break;
    }
    if (best < 0 || evict_before(s, slots_[best])) best = i;
  }
  if (best < 0) return -1;
  Slot& s = slots_[best];
  if (s.key >= 0) where_[s.key] = -1;
  s.key = layer * n_experts_ + expert;
  s.pins = 1;
  s.last_use = ++tick_;
  where_[s.key] = best;
  return best;
}

void ExpertSlotIndex::release(int64_t slot) {
  if (slots_[slot].pins > 0) --slots_[slot].pins;
}

int64_t ExpertSlotIndex::slot_of(int64_t layer, int32_t expert) const {
  return where_[layer * n_experts_ + expert];
}

FillRing::FillRing(std::vector<uint8_t*> buffers, int64_t n_items, Fill fill,
                   WaitCopied wait_copied)
    : buffers_(std::move(buffers)),
      n_(n_items),
      fill_(std::move(fill)),
      wait_copied_(std::move(wait_copied)),
      state_(buffers_.size(), State::kFree),
      item_(buffers_.size(), -1),
      order_(buffers_.size(), 0) {
  if (buffers_.empty() || n_ < 1) throw std::logic_error("FillRing: no buffers or no items");
  // The first items, read while the rest of the load runs.
  for (int64_t k = 0; k < std::min<int64_t>(n_, static_cast<int64_t>(buffers_.size())); ++k)
    wanted_.push_back(k);
  thread_ = std::thread([this] { loop(); });
}

FillRing::~FillRing() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void FillRing::want(int64_t j) {
  if (holding(j) >= 0) return;
  if (std::find(wanted_.begin(), wanted_.end(), j) != wanted_.end()) return;
  wanted_.push_back(j);
}

int FillRing::holding(int64_t j) const {
  for (size_t b = 0; b < buffers_.size(); ++b)
    if (item_[b] == j && (state_[b] == State::kFilling || state_[b] == State::kFilled))
      return static_cast<int>(b);
  return -1;
}

void FillRing::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // A free buffer, else the one whose copy out was announced first (it finishes first).
    int pick = -1;
    cv_.wait(lock, [&] {
      if (stop_) return true;
      if (wanted_.empty()) return false;
      pick = -1;
      for (size_t b = 0; b < buffers_.size(); ++b) {
        if (state_[b] == State::kFree) {
          pick = static_cast<int>(b);
          return true;
        }
        if (state_[b] == State::kCopying && (pick < 0 || order_[b] < order_[pick]))
          pick = static_cast<int>(b);
      }
      return pick >= 0;
    });
    if (stop_) return;
    const int64_t j = wanted_.front();
    wanted_.pop_front();
    const bool copying = state_[pick] == State::kCopying;
    state_[pick] = State::kFilling;
    item_[pick] = j;
    const uint64_t generation = generation_;
    lock.unlock();
    std::string error;
    try {
      if (copying) wait_copied_(pick);
      fill_(j, buffers_[pick]);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (!error.empty()) error_ = error;
    if (!error.empty() || generation != generation_) {  // failed, or read ahead for nothing
      state_[pick] = State::kFree;
      item_[pick] = -1;
    } else {
      state_[pick] = State::kFilled;
    }
    cv_.notify_all();
  }
}

int FillRing::acquire(int64_t j, double* waited_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (holding(j) < 0 && (wanted_.empty() || wanted_.front() != j)) {
    // Out of order: what was read ahead is not wanted, and kept it could hold every buffer.
    for (size_t b = 0; b < buffers_.size(); ++b)
      if (state_[b] == State::kFilled) {
        state_[b] = State::kFree;
        item_[b] = -1;
      }
    wanted_.clear();
    ++generation_;
    wanted_.push_back(j);
    cv_.notify_all();
  }
  const auto t = std::chrono::steady_clock::now();
  int b = -1;
  cv_.wait(lock, [&] {
    b = holding(j);
    return !error_.empty() || (b >= 0 && state_[b] == State::kFilled);
  });
  if (!error_.empty()) throw std::runtime_error("CUDA backend: streamed spine: " + error_);
  *waited_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  return b;
}

void FillRing::copying(int b, int64_t j) {
  std::lock_guard<std::mutex> lock(mu_);
  state_[b] = State::kCopying;
  order_[b] = ++copies_;
  for (int64_t k = 1; k < static_cast<int64_t>(buffers_.size()) && k < n_; ++k) want((j + k) % n_);
  cv_.notify_all();
}

namespace {

void add_pieces(const HostMatrix& h, const DevMatrix& d, std::vector<CopyPiece>* out) {
  if (h.empty()) return;
  if (h.dtype == HostMatrix::DType::kMxfp4) {
    out->push_back(
        {h.data, const_cast<uint8_t*>(d.mx.packed), static_cast<uint64_t>(h.rows) * h.cols / 2});
    out->push_back(
        {h.scales, const_cast<uint8_t*>(d.mx.scales), static_cast<uint64_t>(h.rows) * h.cols / 32});
  } else {
    out->push_back({h.data, reinterpret_cast<uint8_t*>(const_cast<uint16_t*>(d.bf16.data)),
                    static_cast<uint64_t>(h.rows) * h.cols * 2});
  }
}

}  // namespace

std::vector<CopyPiece> expert_copy_pieces(const GpuGlu& host, const DevGlu& slot) {
  std::vector<CopyPiece> pieces, merged;
  add_pieces(host.gate, slot.gate, &pieces);
  add_pieces(host.up, slot.up, &pieces);
  add_pieces(host.down, slot.down, &pieces);
  for (const CopyPiece& p : pieces) {
    if (!merged.empty() && merged.back().src + merged.back().bytes == p.src &&
        merged.back().dst + merged.back().bytes == p.dst) {
      merged.back().bytes += p.bytes;
    } else {
      merged.push_back(p);
    }
  }
  return merged;
}

void parallel_copy(const std::vector<CopyPiece>& pieces, int threads) {
  uint64_t total = 0;
  for (const CopyPiece& p : pieces) total += p.bytes;
  threads = static_cast<int>(std::max<uint64_t>(
      1, std::min<uint64_t>(static_cast<uint64_t>(std::max(threads, 1)), total >> 20)));
  const uint64_t share = (total + threads - 1) / threads;
  std::vector<std::vector<CopyPiece>> work(threads);
  size_t t = 0;
  uint64_t room = share;
  for (CopyPiece p : pieces) {
    while (p.bytes > 0) {
      const uint64_t n = std::min(p.bytes, room);
      work[t].push_back({p.src, p.dst, n});
      p.src += n;
      p.dst += n;
      p.bytes -= n;
      room -= n;
      if (room == 0 && t + 1 < work.size()) {
        ++t;
        room = share;
      }
    }
  }
  const auto run = [](const std::vector<CopyPiece>& list) {
    for (const CopyPiece& p : list) std::memcpy(p.dst, p.src, p.bytes);
  };
  std::vector<std::thread> helpers;
  for (size_t k = 1; k < work.size(); ++k) helpers.emplace_back(run, std::cref(work[k]));
  run(work[0]);
  for (std::thread& h : helpers) h.join();
}

RouteCounts run_route(ExpertSlotIndex& index, ExpertSource* source, ExpertDevice& device,
                      int64_t layer, const std::vector<int32_t>& experts,
                      const std::vector<uint64_t>& expert_bytes) {
  RouteCounts n;
  // The whole route's hits and misses, before any copy.
  const std::vector<int64_t> found = index.lookup(layer, experts);
  std::vector<int32_t> miss_ids;
  std::vector<size_t> miss_at;  // the route index of each miss
  for (size_t i = 0; i < experts.size(); ++i) {
    if (found[i] < 0) {
      miss_ids.push_back(experts[i]);
      miss_at.push_back(i);
      ++n.misses;
      n.miss_bytes += expert_bytes[experts[i]];
    } else {
      ++n.hits;
      n.hit_bytes += expert_bytes[experts[i]];
    }
  }
  // The misses' reads start now, and cross the bus while the hits compute.
  if (!miss_ids.empty()) {
    if (source == nullptr) throw std::logic_error("CUDA backend: expert cache without a source");
    source->request(layer, miss_ids);
  }
  std::vector<std::pair<int64_t, size_t>> hits;
  for (size_t i = 0; i < experts.size(); ++i)
    if (found[i] >= 0) hits.emplace_back(found[i], i);
  if (!hits.empty()) device.compute_hits(hits);
  for (const auto& [slot, i] : hits) index.release(slot);
  if (miss_ids.empty()) return n;
  // Each miss as the source has it: a slot (unpinned ones only: every issued expert's slot is
  // released at once, its copy waiting on the device for that compute), the copy, the products.
  struct Held {
    uint64_t ticket;
    size_t index;
  };
  std::vector<Held> held;
  const size_t max_held = static_cast<size_t>(std::max(1, source->max_held()));
  const auto release_oldest = [&] {
    device.wait_copied(held.front().ticket);
    source->release(held.front().index);
    held.erase(held.begin());
  };
  try {
    for (size_t k = 0; k < miss_ids.size(); ++k) {
      while (held.size() >= max_held) release_oldest();
      const HostExpert h = source->next();
      if (h.index >= miss_ids.size()) throw std::logic_error("CUDA backend: bad expert index");
      const size_t i = miss_at[h.index];
      const int64_t slot = index.take(layer, experts[i]);
      if (slot < 0) throw std::logic_error("CUDA backend: expert cache without a free slot");
      held.push_back({device.copy(slot, h.views), h.index});
      device.compute(slot, i, true);
      index.release(slot);
    }
    while (!held.empty()) release_oldest();
  } catch (...) {
    // Nothing the device may still read is handed back to the source.
    for (const Held& x : held) {
      try {
        device.wait_copied(x.ticket);
        source->release(x.index);
      } catch (...) {
      }
    }
    throw;
  }
  return n;
}

namespace {

std::string mib(uint64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

[[noreturn]] void too_big(const std::string& what, uint64_t need, uint64_t budget,
                          const std::string& fix) {
  throw std::runtime_error("CUDA backend: " + what + " needs " + mib(need) +
                           " of VRAM, more than the budget of " + mib(budget) + "; " + fix);
}

}  // namespace

TierPlan plan_tiers(const GpuModelDesc& desc, const GpuLimits& limits, uint64_t budget) {
  TierPlan t;
  t.n_layers = static_cast<int64_t>(desc.layers.size());
  GpuWeights w;
  Arena globals;
  place_globals(desc, globals, &w);
  std::vector<uint64_t> layer_bytes;
  int64_t top_k = 0;
  for (int64_t l = 0; l < t.n_layers; ++l) {
    Arena a;
    w.layers.push_back(place_layer(desc, l, a, globals));
    layer_bytes.push_back(a.used);
    if (!desc.layers[l].moe) continue;
    top_k = desc.shape.router.top_k;
    for (const GpuGlu& e : desc.layers[l].moe_w.experts) {
      Arena x;
      place_expert(x, e);
      t.expert_slot_bytes = std::max(t.expert_slot_bytes, x.used);
      t.expert_bytes += x.used;
      ++t.n_experts;
    }
    // The whole model's experts come with their table (place_weights); a cache replaces both.
    if (experts_groupable(desc.layers[l].moe_w.experts))
      t.expert_bytes +=
          expert_table_bytes(static_cast<int64_t>(desc.layers[l].moe_w.experts.size()));
  }
  t.global_bytes = globals.used;
  GpuWorkspace ws;
  Arena work;
  place_workspace(desc, limits, work, &ws);
  t.workspace_bytes = work.used;
  GpuSequenceState st;
  Arena seq;
  place_sequence(desc.shape, w.layers, limits, seq, &st);
  t.sequence_bytes = seq.used;

  uint64_t all_layers = 0;
  for (uint64_t b : layer_bytes) all_layers += b;
  t.resident_layers = t.n_layers;
  t.resident_spine_bytes = all_layers;
  t.expert_slots = t.n_experts;
  t.min_expert_slots = std::min<int64_t>(top_k, t.n_experts);
  const bool forced = limits.resident_layers >= 0 || limits.expert_slots > 0;
  if (limits.resident_layers > t.n_layers)
    throw std::invalid_argument("CUDA backend: " + std::to_string(limits.resident_layers) +
                                " resident spine layers asked for, the model has " +
                                std::to_string(t.n_layers));
  if (!forced && t.total() <= budget) return t;

  t.whole = false;
  const std::string working = "the working set (globals " + mib(t.global_bytes) +
                              ", one pass's workspace " + mib(t.workspace_bytes) +
                              ", one sequence at " + std::to_string(limits.max_positions) +
                              " positions " + mib(t.sequence_bytes) + ")";
  if (t.working_bytes() > budget)
    too_big(working, t.working_bytes(), budget, "raise --vram-budget or lower --max-context");
  const int64_t min_slots = limits.expert_slots > 0 ? limits.expert_slots : t.min_expert_slots;
  const uint64_t min_cache = static_cast<uint64_t>(min_slots) * t.expert_slot_bytes;
  // Spine layers first, in layer order (each saves its whole bytes every pass), with room kept
  // for the smallest expert cache and, when any layer streams, its two staging buffers.
  const auto need = [&](int64_t resident, uint64_t* staging, uint64_t* spine) {
    uint64_t largest = 0;
    *spine = 0;
    for (int64_t l = 0; l < t.n_layers; ++l) {
      if (l < resident) {
        *spine += layer_bytes[l];
      } else {
        largest = std::max(largest, layer_bytes[l]);
      }
    }
    *staging = 2 * largest;
    return t.working_bytes() + *spine + *staging + min_cache;
  };
  uint64_t staging = 0, spine = 0;
  int64_t resident = limits.resident_layers >= 0 ? limits.resident_layers : t.n_layers;
  for (;; --resident) {
    if (need(resident, &staging, &spine) <= budget) break;
    if (limits.resident_layers >= 0 || resident == 0) {
      const std::string fix = "raise --vram-budget, or lower --max-context";
      if (t.working_bytes() + staging > budget)
        too_big(working + " and the spine staging (two buffers of the largest streamed layer, " +
                    mib(staging / 2) + " each)",
                t.working_bytes() + staging, budget, fix);
      if (t.working_bytes() + staging + spine > budget)
        too_big(working + ", the staging and " + std::to_string(resident) +
                    " resident spine layers (" + mib(spine) + ", --vram-spine-layers)",
                t.working_bytes() + staging + spine, budget, fix);
      too_big(working + ", the spine staging and the smallest expert cache (" +
                  std::to_string(min_slots) + " slots of " + mib(t.expert_slot_bytes) +
                  (limits.expert_slots > 0 ? ", --vram-expert-slots" : ", one row's route") + ")",
              need(resident, &staging, &spine), budget, fix);
    }
  }
  t.resident_layers = resident;
  t.resident_spine_bytes = spine;
  t.streamed_spine_bytes = all_layers - spine;
  t.staging_bytes = staging;
  if (t.streamed_layers() > 0) {
    t.spine_ring_buffers = kSpineRingBuffers;
    t.spine_ring_bytes = static_cast<uint64_t>(kSpineRingBuffers) * (staging / 2);
  }
  if (limits.expert_slots > 0) {
    t.expert_slots = std::min<int64_t>(limits.expert_slots, t.n_experts);
  } else {
    const uint64_t left = budget - (t.working_bytes() + spine + staging);
    t.expert_slots =
        t.expert_slot_bytes == 0
            ? 0
            : std::min<int64_t>(static_cast<int64_t>(left / t.expert_slot_bytes), t.n_experts);
  }
  t.expert_bytes = static_cast<uint64_t>(t.expert_slots) * t.expert_slot_bytes;
  if (t.expert_slots > 0)
    t.expert_staging_bytes = static_cast<uint64_t>(kExpertStagingBuffers) * t.expert_slot_bytes;
  return t;
}

void check_host_tiers(const TierPlan& t, uint64_t host_budget) {
  if (t.pinned_host_bytes() <= host_budget) return;
  throw std::runtime_error(
      "CUDA backend: the tiers' pinned host memory (the streamed spine's ring, " +
      std::to_string(t.spine_ring_buffers) + " buffers of the largest streamed layer " +
      mib(t.spine_ring_bytes) + "; the mapped experts' staging " + mib(t.expert_staging_bytes) +
      ") needs " + mib(t.pinned_host_bytes()) + " of host memory, more than the " +
      mib(host_budget) +
      " the RAM budget leaves; raise --memory-budget, or raise --vram-budget (or "
      "--vram-spine-layers) so that no spine layer streams");
}

std::string describe_tiers(const TierPlan& t) {
  std::string out = mib(t.total()) + ": working set " + mib(t.working_bytes()) + " (globals " +
                    mib(t.global_bytes) + ", workspace " + mib(t.workspace_bytes) +
                    ", one sequence " + mib(t.sequence_bytes) + ")";
  if (t.whole)
    return out + ", spine " + std::to_string(t.n_layers) + " layers " +
           mib(t.resident_spine_bytes) + ", routed experts " + std::to_string(t.n_experts) + " " +
           mib(t.expert_bytes) + ": the whole model in VRAM";
  out += "; spine " + std::to_string(t.resident_layers) + " of " + std::to_string(t.n_layers) +
         " layers resident " + mib(t.resident_spine_bytes);
  if (t.streamed_layers() > 0)
    out += ", " + std::to_string(t.streamed_layers()) + " streamed every pass " +
           mib(t.streamed_spine_bytes) + " from host memory through a pinned ring " +
           mib(t.spine_ring_bytes) + " and staging " + mib(t.staging_bytes);
  out += "; expert cache " + std::to_string(t.expert_slots) + " slots of " +
         mib(t.expert_slot_bytes) + " " + mib(t.expert_bytes) + " (minimum " +
         std::to_string(t.min_expert_slots) + ") for " + std::to_string(t.n_experts) +
         " routed experts, misses copied from host memory";
  return out;
}

}  // namespace deltafin::cuda
