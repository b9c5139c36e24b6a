// StreamingExpertStore: slot bookkeeping (pins, LRU, speculative reads), batches that hand out
// experts as their reads complete, on-demand fetches of remote experts, and the lookahead's
// per-layer recall gate.
#include "experts/streaming_expert_store.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "base/stopwatch.h"
#include "base/timeline.h"

namespace deltafin::experts {
namespace {

// A route or a guess as a point on the timeline: {"layer":3,"experts":[5,811,40]}.
void trace_experts(const char* name, int layer, std::span<const int32_t> experts) {
  std::string args = base::str_cat("\"layer\":", layer, ",\"experts\":[");
  for (size_t i = 0; i < experts.size(); ++i) args += base::str_cat(i ? "," : "", experts[i]);
  args += "]";
  const auto now = std::chrono::steady_clock::now();
  base::timeline::span(base::timeline::kCompute, name, "route", now, now, std::move(args));
}

}  // namespace

class StreamingExpertStore::Batch : public ExpertBatch {
 public:
  struct Entry {
    int32_t expert = 0;
    int slot = -1;  // -1 while waiting for a free slot
    bool handed = false;
    bool released = false;
  };

  Batch(StreamingExpertStore* store, int layer, std::span<const int32_t> experts)
      : store_(store), layer_(layer) {
    entries_.reserve(experts.size());
    for (int32_t e : experts) entries_.push_back({e});
  }

  ~Batch() override {
    std::lock_guard<std::mutex> lock(store_->mu_);
    std::erase_if(store_->waiters_, [this](const Waiter& w) { return w.batch == this; });
    for (Entry& e : entries_) {
      if (e.slot >= 0 && !e.released) store_->unpin(e.slot);
    }
    store_->cv_.notify_all();
  }

  size_t size() const override { return entries_.size(); }

  ReadyExpert acquire_next() override {
    std::unique_lock<std::mutex> lock(store_->mu_);
    DF_ASSERT(n_handed_ < entries_.size());
    const base::Stopwatch wait;
    bool waited = false;
    size_t pick = entries_.size();
    for (;;) {
      for (size_t i = 0; i < entries_.size() && pick == entries_.size(); ++i) {
        const Entry& e = entries_[i];
        if (e.slot < 0 || e.handed) continue;
        const Slot& s = store_->slots_[e.slot];
        if (s.state == SlotState::kFailed) base::fail(s.error);
        if (s.state == SlotState::kReady) pick = i;
      }
      if (pick < entries_.size()) break;
      waited = true;
      store_->cv_.wait(lock);
    }
    if (waited) {
      const base::SteadyClock::time_point end = base::SteadyClock::now();
      store_->stats_.wait_seconds += wait.seconds_until(end);
      base::timeline::span(base::timeline::kCompute, "wait for expert", "io wait", wait.start(),
                           end, base::str_cat("\"layer\":", layer_));
    }
    Entry& e = entries_[pick];
    e.handed = true;
    ++n_handed_;
    Slot& slot = store_->slots_[e.slot];
    const ExpertWeights w = view_expert(store_->catalog_.layers[layer_].layout,
                                        store_->slot_data(e.slot) + slot.data_offset);
    if (!slot.checked) {
      lock.unlock();  // the slot is pinned: nothing can reuse it meanwhile
      check_expert_scales(w, layer_, e.expert);
      lock.lock();
      slot.checked = true;
    }
    return {pick, e.expert, w};
  }

  void release(size_t index) override {
    std::lock_guard<std::mutex> lock(store_->mu_);
    DF_ASSERT(index < entries_.size() && entries_[index].handed && !entries_[index].released);
    entries_[index].released = true;
    store_->unpin(entries_[index].slot);
  }

  std::vector<Entry> entries_;

 private:
  StreamingExpertStore* store_;
  int layer_;
  size_t n_handed_ = 0;
};

uint64_t StreamingExpertStore::slot_bytes(const ExpertCatalog& catalog) {
  size_t most = 0;
  for (const ExpertCatalog::Layer& layer : catalog.layers) {
    for (const format::ExpertSpan& span : layer.spans)
      most = std::max(most, io::align_span(span.offset, span.nbytes).read_length);
  }
  return most;
}

StreamingExpertStore::StreamingExpertStore(ExpertCatalog catalog,
                                           std::shared_ptr<io::ReadScheduler> scheduler,
                                           const StreamingStoreOptions& options,
                                           std::shared_ptr<ExpertFetcher> fetcher)
    : catalog_(std::move(catalog)),
      scheduler_(std::move(scheduler)),
      options_(options),
      fetcher_(std::move(fetcher)),
      guard_(std::make_shared<FetchGuard>()) {
  DF_ASSERT(options_.n_slots >= 2);
  guard_->store = this;
  for (const ExpertCatalog::Layer& layer : catalog_.layers) {
    n_experts_max_ = std::max<uint64_t>(n_experts_max_, layer.spans.size());
    if (fetcher_) continue;
    for (const format::ExpertSpan& span : layer.spans) {
      if (!files_.contains(span.file)) {
        auto it =
            files_.emplace(span.file, io::DirectFile::open(span.file, options_.allow_direct)).first;
        file_drive_[span.file] = scheduler_->drives().drive_of_fd(it->second.fd());
      }
    }
  }
  if (options_.placement) {
    const Placement& p = *options_.placement;
    if (p.dirs.size() > 64)
      base::fail(p.manifest_path, ": ", p.dirs.size(), " drives; at most 64 are supported");
    holder_drive_.assign(p.dirs.size(), -1);
    holder_failed_.assign(p.dirs.size(), false);
    for (size_t h = 0; h < p.dirs.size(); ++h) {
      try {
        holder_drive_[h] = scheduler_->drives().drive_of_path(p.dirs[h]);
      } catch (const base::Error& e) {
        fail_holder(static_cast<int>(h), e.what());
      }
    }
    uint64_t placed = 0, copies = 0, pieces = 0, stale = 0;
    for (size_t l = 0; l < catalog_.layers.size(); ++l) {
      for (size_t e = 0; e < catalog_.layers[l].spans.size(); ++e) {
        const PlacedExpert* pe = p.find(static_cast<int>(l), static_cast<int>(e));
        if (pe == nullptr) continue;
        if (pe->nbytes != catalog_.layers[l].spans[e].nbytes) {
          ++stale;
          continue;
        }
        ++placed;
        copies += pe->holders.size();
        pieces += pe->pieces.size();
      }
    }
    if (p.layout == Layout::kStripe) {
      base::log_info("placement (", p.manifest_path, "): ", placed, " experts striped over ",
                     p.dirs.size(), " drive folders (", pieces, " pieces)");
    } else {
      base::log_info("placement (", p.manifest_path, "): ", placed, " experts, ", copies,
                     " copies over ", p.dirs.size(), " drive folders");
    }
    if (stale > 0)
      base::log_warn(p.manifest_path, ": ", stale,
                     " experts' copies do not match the checkpoint's span sizes (placed for "
                     "another checkpoint?); those are read from the shards");
  }
  slot_stride_ = slot_bytes(catalog_);
  DF_ASSERT(slot_stride_ > 0);
  pool_ = io::HugeBuffer(slot_stride_ * static_cast<size_t>(options_.n_slots));
  slots_.resize(options_.n_slots);
  predicted_.resize(catalog_.layers.size());
  uses_.assign(catalog_.layers.size() * n_experts_max_, 0);
  recall_.assign(catalog_.layers.size(), 1.0);
}

StreamingExpertStore::~StreamingExpertStore() {
  {
    std::lock_guard<std::mutex> g(guard_->mu);
    guard_->store = nullptr;
  }
  std::unique_lock<std::mutex> lock(mu_);
  for (Slot& s : slots_) {
    if (s.state != SlotState::kReading || s.cancelled) continue;
    const io::CancelResult r = cancel_read(s);
    if (r == io::CancelResult::kDropped) {
      s.state = SlotState::kEmpty;
      --reads_in_flight_;
    } else if (r == io::CancelResult::kStopping) {
      s.cancelled = true;
    }
  }
  cv_.wait(lock, [&] { return reads_in_flight_ == 0; });
}

std::function<int()> StreamingExpertStore::orphaned_fetches() const {
  return [guard = guard_] {
    std::lock_guard<std::mutex> g(guard->mu);
    return guard->orphaned;
  };
}

bool StreamingExpertStore::prefetch_enabled(int layer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return recall_[layer] >= options_.min_prefetch_recall;
}

bool StreamingExpertStore::evict_before(const Slot& a, const Slot& b) const {
  // Unused predictions go last: the route they were read for is about to ask for them.
  if (a.speculative != b.speculative) return !a.speculative;
  if (options_.policy == CachePolicy::kLfu) {
    const uint32_t ua = uses_[key(a.layer, a.expert)], ub = uses_[key(b.layer, b.expert)];
    if (ua != ub) return ua < ub;
  }
  return a.last_use < b.last_use;
}

int StreamingExpertStore::take_slot(bool for_prefetch) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& s = slots_[i];
    if (s.pins > 0 || s.state == SlotState::kReading || s.state == SlotState::kFetching) continue;
    if (s.state != SlotState::kReady) {  // empty or failed: free
      best = i;
      break;
    }
    // A prediction never displaces another prediction that is still waiting to be used.
    if (for_prefetch && s.speculative) continue;
    if (best < 0 || evict_before(s, slots_[best])) best = i;
  }
  if (best < 0) return -1;
  Slot& s = slots_[best];
  if (s.state == SlotState::kReady) {
    where_.erase(key(s.layer, s.expert));
    if (!s.used) ++stats_.prefetch_wasted;
    if (s.speculative) --speculative_slots_;
  }
  s = Slot{};
  return best;
}

void StreamingExpertStore::start_load(int s, int layer, int32_t expert, io::ReadPriority priority) {
  const format::ExpertSpan& span = catalog_.layers[layer].spans[expert];
  const io::AlignedSpan a = io::align_span(span.offset, span.nbytes);
  DF_ASSERT(a.read_length <= slot_stride_);
  Slot& slot = slots_[s];
  slot.layer = layer;
  slot.expert = expert;
  slot.data_offset = a.data_offset;
  slot.read_bytes = a.read_length;
  slot.speculative = priority == io::ReadPriority::kSpeculative;
  slot.last_use = ++tick_;
  where_[key(layer, expert)] = s;
  // A placed copy is read from the drives even when the pool lost its cache file.
  if (fetcher_ && !fetcher_->is_local(layer, expert) && !placed_readable(layer, expert)) {
    DF_ASSERT(!slot.speculative);  // prefetch() never fetches
    start_fetch(s);
    return;
  }
  submit_read(s);
}

void StreamingExpertStore::start_fetch(int s) {
  Slot& slot = slots_[s];
  slot.state = SlotState::kFetching;
  // The callback runs on a fetcher thread, never inside fetch(), so holding mu_ here is fine.
  fetcher_->fetch(slot.layer, slot.expert, [guard = guard_, s](const std::string& error) {
    std::lock_guard<std::mutex> g(guard->mu);
    if (guard->store) {
      guard->store->on_fetch_done(s, error);
    } else {
      ++guard->orphaned;
    }
  });
}

bool StreamingExpertStore::placed_readable(int layer, int32_t expert) const {
  return live_stripe(layer, expert) != nullptr || choose_holder(layer, expert, 0) >= 0;
}

int StreamingExpertStore::choose_holder(int layer, int32_t expert, uint64_t tried) const {
  if (!options_.placement) return -1;
  const PlacedExpert* pe = options_.placement->find(layer, expert);
  if (pe == nullptr || pe->nbytes != catalog_.layers[layer].spans[expert].nbytes) return -1;
  std::vector<int> drives, holders;
  for (int h : pe->holders) {
    if (holder_failed_[h] || (tried >> h & 1) != 0) continue;
    drives.push_back(holder_drive_[h]);
    holders.push_back(h);
  }
  if (holders.empty()) return -1;
  const int d = scheduler_->drives().pick(drives, pe->nbytes);
  for (size_t i = 0; i < drives.size(); ++i)
    if (drives[i] == d) return holders[i];
  return holders[0];
}

void StreamingExpertStore::fail_holder(int h, const std::string& why) {
  if (holder_failed_[h]) return;
  holder_failed_[h] = true;
  base::log_warn("drive folder ", options_.placement->dirs[h], " failed: ", why,
                 options_.placement->layout == Layout::kStripe
                     ? "; the experts striped over it are read from the model folder (shards or "
                       "cache files) from now on"
                     : "; its experts are read from another holder or the model folder (shards "
                       "or cache files) from now on");
}

const PlacedExpert* StreamingExpertStore::live_stripe(int layer, int32_t expert) const {
  if (!options_.placement || options_.placement->layout != Layout::kStripe) return nullptr;
  const PlacedExpert* pe = options_.placement->find(layer, expert);
  if (pe == nullptr || pe->nbytes != catalog_.layers[layer].spans[expert].nbytes) return nullptr;
  for (const StripePiece& p : pe->pieces)
    if (holder_failed_[p.dir]) return nullptr;
  return pe;
}

int StreamingExpertStore::planned_drive(int layer, int32_t expert) const {
  // A striped read touches every drive in proportion to its bandwidth: no one drive to charge.
  if (live_stripe(layer, expert) != nullptr) return -1;
  const int h = choose_holder(layer, expert, 0);
  if (h >= 0) return holder_drive_[h];
  if (fetcher_) return -1;
  return file_drive_.at(catalog_.layers[layer].spans[expert].file);
}

int StreamingExpertStore::prefetch_allowance(int drive) const {
  if (drive < 0) return options_.max_prefetch_slots;
  // A share of the allowance by bandwidth, so a slow drive's guesses cannot hold all of it.
  double total = 0, mine = 0;
  const std::vector<io::DriveStats> drives = scheduler_->drives().stats();
  for (size_t d = 0; d < drives.size(); ++d) {
    total += drives[d].bandwidth_gbps;
    if (static_cast<int>(d) == drive) mine = drives[d].bandwidth_gbps;
  }
  if (total <= 0) return options_.max_prefetch_slots;
  return std::max(1, static_cast<int>(std::ceil(options_.max_prefetch_slots * mine / total)));
}

bool StreamingExpertStore::submit_stripe(int s) {
  Slot& slot = slots_[s];
  const PlacedExpert* pe = live_stripe(slot.layer, slot.expert);
  if (pe == nullptr) return false;
  // Every piece file open and of its size before any read starts, so a missing piece costs no
  // reads and the shard read that replaces the stripe never shares the slot with a piece.
  std::vector<io::DirectFile> files;
  for (const StripePiece& p : pe->pieces) {
    const std::string path =
        piece_file(options_.placement->dirs[p.dir], slot.layer, slot.expert, p.offset);
    try {
      files.push_back(io::DirectFile::open(path, options_.allow_direct));
    } catch (const base::Error& e) {
      fail_holder(p.dir, e.what());
      return false;
    }
    if (files.back().size_bytes() != p.nbytes) {
      fail_holder(p.dir, base::str_cat(path, " has ", files.back().size_bytes(),
                                       " bytes, expected ", p.nbytes));
      return false;
    }
  }
  slot.pieces = std::move(files);
  slot.drive = -1;
  slot.data_offset = 0;
  slot.state = SlotState::kReading;
  slot.jobs.assign(pe->pieces.size(), 0);
  slot.pending = static_cast<int>(pe->pieces.size());
  ++reads_in_flight_;
  for (size_t i = 0; i < pe->pieces.size(); ++i) {
    const StripePiece& p = pe->pieces[i];
    // Pieces start on kPieceAlignment boundaries of the slot; the last may end mid-block, and its
    // aligned request then reads up to the end of its file.
    const io::AlignedSpan a = io::align_span(0, p.nbytes);
    io::ReadJob job;
    job.file = &slot.pieces[i];
    job.offset = 0;
    job.length = a.read_length;
    job.required_bytes = a.required_bytes;
    job.dest = slot_data(s) + p.offset;
    job.priority = slot.speculative ? io::ReadPriority::kSpeculative : io::ReadPriority::kNow;
    job.done = [this, s, i, dir = p.dir](const io::ReadCompletion& c) {
      on_read_done(s, i, dir, c);
    };
    job.trace_layer = slot.layer;
    job.trace_expert = slot.expert;
    job.piece_bytes = options_.read_piece_bytes;
    job.drive = holder_drive_[p.dir];
    // The callbacks wait for mu_, which the caller holds until every id is recorded.
    slot.jobs[i] = scheduler_->submit(std::move(job));
  }
  return true;
}

io::CancelResult StreamingExpertStore::cancel_read(Slot& slot) {
  int dropped = 0, stopping = 0;
  for (uint64_t& id : slot.jobs) {
    if (id == 0) continue;  // landed
    const io::CancelResult r = scheduler_->cancel(id);
    if (r == io::CancelResult::kDropped) {
      ++dropped;
      id = 0;  // its callback never runs
    } else if (r == io::CancelResult::kStopping) {
      ++stopping;
    }
  }
  slot.pending -= dropped;
  if (slot.pending == 0) return io::CancelResult::kDropped;
  // Part of the expert will never arrive: the pieces still coming only have to land.
  if (dropped > 0 || stopping > 0) return io::CancelResult::kStopping;
  return io::CancelResult::kTooLate;
}

void StreamingExpertStore::submit_read(int s) {
  if (submit_stripe(s)) return;
  Slot& slot = slots_[s];
  const format::ExpertSpan& span = catalog_.layers[slot.layer].spans[slot.expert];
  int h = -1;
  while ((h = choose_holder(slot.layer, slot.expert, slot.tried)) >= 0) {
    slot.tried |= uint64_t{1} << h;
    const std::string path = placed_file(options_.placement->dirs[h], slot.layer, slot.expert);
    try {
      slot.file = io::DirectFile::open(path, options_.allow_direct);
    } catch (const base::Error& e) {
      fail_holder(h, e.what());
      continue;
    }
    if (slot.file.size_bytes() != span.nbytes) {
      fail_holder(h, base::str_cat(path, " has ", slot.file.size_bytes(), " bytes, expected ",
                                   span.nbytes));
      slot.file = io::DirectFile{};
      continue;
    }
    break;
  }
  const io::AlignedSpan a = io::align_span(h >= 0 ? 0 : span.offset, span.nbytes);
  slot.data_offset = a.data_offset;
  const io::DirectFile* file = nullptr;
  int drive = -1;
  if (h >= 0) {
    file = &slot.file;
    drive = holder_drive_[h];
  } else if (fetcher_) {
    if (!fetcher_->is_local(slot.layer, slot.expert)) {
      // Its placed copies failed and the pool has no cache file: a demand fetches it again; a
      // guess never goes to the network (prefetch()), so it is given back.
      if (slot.speculative) {
        fail_slot(s, base::str_cat("layer ", slot.layer, " expert ", slot.expert,
                                   ": its placed copies failed and it is not local"));
      } else {
        start_fetch(s);
      }
      return;
    }
    try {
      slot.file = io::DirectFile::open(span.file, options_.allow_direct);
    } catch (const base::Error& e) {
      fail_slot(s, base::str_cat("layer ", slot.layer, " expert ", slot.expert, ": ", e.what()));
      return;
    }
    file = &slot.file;
  } else {
    file = &files_.at(span.file);
    drive = file_drive_.at(span.file);
  }
  slot.drive = drive;
  slot.state = SlotState::kReading;
  ++reads_in_flight_;
  io::ReadJob job;
  job.file = file;
  job.offset = a.read_offset;
  job.length = a.read_length;
  job.required_bytes = a.required_bytes;
  job.dest = slot_data(s);
  job.priority = slot.speculative ? io::ReadPriority::kSpeculative : io::ReadPriority::kNow;
  job.done = [this, s, h](const io::ReadCompletion& c) { on_read_done(s, 0, h, c); };
  job.trace_layer = slot.layer;
  job.trace_expert = slot.expert;
  job.piece_bytes = options_.read_piece_bytes;
  job.drive = drive;
  slot.pending = 1;
  slot.jobs = {scheduler_->submit(std::move(job))};
}

void StreamingExpertStore::fail_slot(int s, std::string message) {
  Slot& slot = slots_[s];
  slot.state = SlotState::kFailed;
  slot.error = std::move(message);
  slot.file = io::DirectFile{};
  where_.erase(key(slot.layer, slot.expert));  // a later request tries again
  if (slot.speculative) --speculative_slots_;
  slot.speculative = false;
}

void StreamingExpertStore::on_read_done(int s, size_t j, int dir, const io::ReadCompletion& c) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[s];
  stats_.bytes_read += c.bytes;
  DF_ASSERT(j < slot.jobs.size() && slot.jobs[j] != 0 && slot.pending > 0);
  slot.jobs[j] = 0;
  --slot.pending;
  if (!c.ok() && (slot.read_errno == 0 || (slot.read_errno == ECANCELED && c.error != ECANCELED))) {
    slot.read_errno = c.error;
    slot.read_error = c.message;
    slot.error_dir = dir;
    // One failed piece spoils the expert: stop the others at their next request.
    if (slot.pending > 0 && c.error != ECANCELED) cancel_read(slot);
  }
  if (slot.pending > 0) return;  // pieces of a striped read still to land
  --reads_in_flight_;
  const int error = slot.read_errno;
  const int error_dir = slot.error_dir;
  const std::string message = std::move(slot.read_error);
  slot.read_errno = 0;
  slot.error_dir = -1;
  slot.read_error.clear();
  slot.jobs.clear();
  slot.pieces.clear();
  if (slot.cancelled) {  // a guess stopped mid-read; nothing maps to it any more
    slot = Slot{};
  } else if (error == 0) {
    slot.state = SlotState::kReady;
    slot.file = io::DirectFile{};  // a cache file is read once; a shard file is not the slot's
  } else if (error_dir >= 0 && error != ECANCELED) {
    // A placed copy or piece that errs: the next holder, or the shard, reads it instead.
    fail_holder(error_dir, message);
    slot.file = io::DirectFile{};
    submit_read(s);
  } else {
    fail_slot(s, base::str_cat("layer ", slot.layer, " expert ", slot.expert, ": ", message));
  }
  if (slot.pins == 0) serve_waiters();
  cv_.notify_all();
}

void StreamingExpertStore::on_fetch_done(int s, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& slot = slots_[s];
  DF_ASSERT(slot.state == SlotState::kFetching);
  if (!error.empty()) {
    fail_slot(s, error);
  } else if (slot.pins == 0) {
    // Every batch that wanted it is gone (an error elsewhere): the expert is local now, and
    // reading it can wait until a route asks again.
    ++stats_.experts_fetched;
    where_.erase(key(slot.layer, slot.expert));
    slot = Slot{};
  } else {
    ++stats_.experts_fetched;
    submit_read(s);
  }
  if (slot.pins == 0) serve_waiters();
  cv_.notify_all();
}

void StreamingExpertStore::retire_guesses(int layer, std::span<const int32_t> keep,
                                          bool route_known) {
  for (Slot& s : slots_) {
    if (s.layer != layer || !s.speculative) continue;
    if (std::find(keep.begin(), keep.end(), s.expert) != keep.end()) continue;
    const io::CancelResult r =
        s.state == SlotState::kReading ? cancel_read(s) : io::CancelResult::kTooLate;
    if (r == io::CancelResult::kDropped) {
      where_.erase(key(s.layer, s.expert));
      --reads_in_flight_;
      --speculative_slots_;
      ++stats_.prefetch_cancelled;
      s = Slot{};
    } else if (r == io::CancelResult::kStopping) {
      // Its pieces in flight land in the slot, which stays kReading (so nothing takes it) until
      // on_read_done empties it.
      where_.erase(key(s.layer, s.expert));
      --speculative_slots_;
      ++stats_.prefetch_stopped;
      s.speculative = false;
      s.cancelled = true;
    } else if (route_known) {
      s.speculative = false;
      --speculative_slots_;
    }
  }
}

void StreamingExpertStore::unpin(int s) {
  Slot& slot = slots_[s];
  DF_ASSERT(slot.pins > 0);
  slot.last_use = ++tick_;
  if (--slot.pins == 0) serve_waiters();
}

void StreamingExpertStore::serve_waiters() {
  while (!waiters_.empty()) {
    const int s = take_slot(/*for_prefetch=*/false);
    if (s < 0) return;
    const Waiter w = waiters_.front();
    waiters_.erase(waiters_.begin());
    Batch::Entry& e = w.batch->entries_[w.index];
    start_load(s, w.layer, e.expert, io::ReadPriority::kNow);
    Slot& slot = slots_[s];
    slot.pins = 1;
    slot.used = true;
    ++stats_.demand_reads;
    stats_.needed_bytes += slot.read_bytes;
    e.slot = s;
  }
}

std::unique_ptr<ExpertBatch> StreamingExpertStore::request(int layer,
                                                           std::span<const int32_t> experts) {
  DF_ASSERT(layer >= 0 && static_cast<size_t>(layer) < catalog_.layers.size());
  auto batch = std::make_unique<Batch>(this, layer, experts);
  if (base::timeline::on()) trace_experts("route", layer, experts);
  std::lock_guard<std::mutex> lock(mu_);

  std::vector<int32_t>& predicted = predicted_[layer];
  if (!predicted.empty()) {
    uint64_t matched = 0;
    for (int32_t e : experts) matched += std::count(predicted.begin(), predicted.end(), e);
    stats_.predicted_actual += experts.size();
    stats_.predicted_matched += matched;
    recall_[layer] = (1 - kRecallWeight) * recall_[layer] +
                     kRecallWeight * static_cast<double>(matched) / experts.size();
    predicted.clear();
  }
  // Predictions for this layer that missed: dropped if still queued, else plain cache entries.
  retire_guesses(layer, experts, /*route_known=*/true);

  for (size_t i = 0; i < experts.size(); ++i) {
    const int32_t e = experts[i];
    DF_ASSERT(e >= 0 && static_cast<size_t>(e) < catalog_.layers[layer].spans.size());
    ++stats_.experts_requested;
    ++uses_[key(layer, e)];
    Batch::Entry& entry = batch->entries_[i];
    auto it = where_.find(key(layer, e));
    if (it != where_.end()) {
      Slot& s = slots_[it->second];
      // Never used, it came from a guess: still speculative, it is this pass's; no longer
      // speculative, it is one an earlier route passed over (retire_guesses), which counts as
      // needed only while its bytes are still on their way from the disk.
      if (!s.used && (s.speculative || s.state != SlotState::kReady)) {
        ++stats_.prefetch_hits;
        stats_.needed_bytes += s.read_bytes;
        if (s.speculative) --speculative_slots_;
        s.speculative = false;
        if (s.state == SlotState::kReading)
          for (uint64_t id : s.jobs)
            if (id != 0) scheduler_->promote(id, io::ReadPriority::kNow);
      } else {
        ++stats_.cache_hits;  // in memory from an earlier use, or from an earlier route's guess
      }
      s.used = true;
      ++s.pins;
      s.last_use = ++tick_;
      entry.slot = it->second;
      continue;
    }
    const int s = take_slot(/*for_prefetch=*/false);
    if (s < 0) {
      waiters_.push_back({batch.get(), layer, i});
      continue;
    }
    start_load(s, layer, e, io::ReadPriority::kNow);
    slots_[s].pins = 1;
    slots_[s].used = true;
    ++stats_.demand_reads;
    stats_.needed_bytes += slots_[s].read_bytes;
    entry.slot = s;
  }
  return batch;
}

void StreamingExpertStore::prefetch(int layer, std::span<const int32_t> experts) {
  DF_ASSERT(layer >= 0 && static_cast<size_t>(layer) < catalog_.layers.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (base::timeline::on())
    trace_experts(recall_[layer] < options_.min_prefetch_recall ? "guess (gated off)" : "guess",
                  layer, experts);
  predicted_[layer].assign(experts.begin(), experts.end());
  // A newer guess for the layer supersedes an older one: drop its reads that are still queued.
  retire_guesses(layer, experts, /*route_known=*/false);
  if (recall_[layer] < options_.min_prefetch_recall) return;
  for (int32_t e : experts) {
    DF_ASSERT(e >= 0 && static_cast<size_t>(e) < catalog_.layers[layer].spans.size());
    auto it = where_.find(key(layer, e));
    if (it != where_.end()) {
      slots_[it->second].last_use = ++tick_;  // keep it until the route is known
      continue;
    }
    // A guess never goes to the network: a wrong one would cost a whole expert's transfer (17.5 MB
    // for K3, seconds over a typical link) and a connection the demand fetches need, against
    // a local read that only uses the disk's idle time. Remote experts are fetched on demand.
    if (fetcher_ && !fetcher_->is_local(layer, e) && !placed_readable(layer, e)) continue;
    if (speculative_slots_ >= options_.max_prefetch_slots) break;
    // A striped guess (planned drive -1) reads from every drive in proportion to its bandwidth,
    // the split the per-drive shares approximate: the overall allowance alone holds it.
    const int d = options_.placement ? planned_drive(layer, e) : -1;
    if (d >= 0) {
      int on_drive = 0;
      for (const Slot& sl : slots_) on_drive += sl.speculative && sl.drive == d;
      if (on_drive >= prefetch_allowance(d)) continue;
    }
    const int s = take_slot(/*for_prefetch=*/true);
    if (s < 0) break;
    ++speculative_slots_;  // before start_load: a read that fails to start gives it back
    start_load(s, layer, e, io::ReadPriority::kSpeculative);
    ++stats_.prefetch_reads;
  }
}

ExpertStoreStats StreamingExpertStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace deltafin::experts
