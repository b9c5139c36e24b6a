// StreamingExpertStore: routed experts read from the shards on demand, one O_DIRECT read per
// expert (one per piece, each on its own drive, for a striped placement) into a fixed pool of
// slots in huge-page memory, handed out in completion order. The pool is also the RAM cache: a
// released slot keeps its expert until the policy (least frequently requested by default) picks
// it for a new read, and prefetches land in the same slots without ever evicting a slot in use.
// With an ExpertFetcher (a streaming install), an expert that is not local yet is fetched first
// and read once its cache file is published.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "experts/expert_fetcher.h"
#include "experts/expert_store.h"
#include "experts/placement.h"
#include "io/direct_file.h"
#include "io/huge_buffer.h"
#include "io/read_scheduler.h"

namespace deltafin::experts {

using io::CancelResult;
using io::ReadJob;
using io::ReadPriority;
using io::ReadScheduler;

// Which cached expert a new read replaces. Both keep unused predictions to the last.
enum class CachePolicy {
  kLfu,  // fewest requests since load, then least recently used (measured best: STREAMING.md)
  kLru,  // least recently used
};

struct StreamingStoreOptions {
  int n_slots = 32;  // experts held at once (in use, in flight, cached); at least 2
  // Prefetches stay below this many slots that are being read or were read and not yet used.
  int max_prefetch_slots = 16;
  // A layer's lookahead is acted on only while its recent recall (exponential average over
  // passes, weight kRecallWeight) is at least this; below, predictions are only scored.
  double min_prefetch_recall = 0.25;
  // > 0: each expert is read in requests of this many bytes (see io::ReadJob::piece_bytes), so a
  // guess the route did not pick stops reading at its next piece. 0: one request per expert.
  size_t read_piece_bytes = 0;
  bool allow_direct = true;  // false: buffered reads + FADV_DONTNEED (tests)
  CachePolicy policy = CachePolicy::kLfu;
  // Copies placed over drives (`deltafin place`). Whole layout: each read goes to the live holder
  // expected to finish first. Stripe: one read per piece, each on its own drive, all into the
  // expert's slot. A folder that is missing or errs is reported once and skipped from then on
  // (a striped expert with a piece there is read whole from the shard); the model folder is the
  // copy of last resort. With a fetcher (a placed streaming install), placed experts are read from
  // the drives; the others, and those whose copies failed, come from the pool (its cache file, or
  // a fetch on demand).
  std::shared_ptr<const Placement> placement;
};

class StreamingExpertStore : public ExpertStore {
 public:
  static constexpr double kRecallWeight = 0.25;

  // Without a fetcher, opens every shard the catalog names (throws base::Error naming the file).
  // With one, the catalog's spans are per-expert cache files that may not exist yet: a demand for
  // one that is not local fetches it first, and each file is opened only for its read (a full
  // pool has one file per expert, far more than a process may keep open).
  StreamingExpertStore(ExpertCatalog catalog, std::shared_ptr<io::ReadScheduler> scheduler,
                       const StreamingStoreOptions& options,
                       std::shared_ptr<ExpertFetcher> fetcher = nullptr);
  // Waits for its reads in flight; fetches in flight finish in the fetcher, unobserved.
  ~StreamingExpertStore() override;

  std::unique_ptr<ExpertBatch> request(int layer, std::span<const int32_t> experts) override;
  void prefetch(int layer, std::span<const int32_t> experts) override;
  ExpertStoreStats stats() const override;

  // The bytes one slot takes: the largest aligned read of any expert (4 KiB granularity).
  static uint64_t slot_bytes(const ExpertCatalog& catalog);
  int n_slots() const { return static_cast<int>(slots_.size()); }
  // The slots' memory (every expert handed out lies in it), e.g. for a GPU to pin it so its
  // copies out of the slots run at the pinned rate.
  uint8_t* pool_data() { return pool_.data(); }
  size_t pool_bytes() const { return pool_.size(); }
  // Whether prefetches for `layer` are being issued now (its lookahead recall is high enough).
  bool prefetch_enabled(int layer) const;
  // Counts the fetch callbacks that came after this store was destroyed (and so touched nothing);
  // the counter outlives the store, as those fetches do.
  std::function<int()> orphaned_fetches() const;

 private:
  class Batch;
  friend class Batch;

  enum class SlotState { kEmpty, kFetching, kReading, kReady, kFailed };
  struct Slot {
    SlotState state = SlotState::kEmpty;
    int layer = -1;
    int32_t expert = -1;
    int pins = 0;            // batch entries holding it
    uint64_t last_use = 0;   // LRU tick
    size_t data_offset = 0;  // where the span starts inside the slot
    size_t read_bytes = 0;   // the aligned read's length
    // While kReading: the scheduler jobs of the read, one per stripe piece (one otherwise); an
    // id is 0 once its callback has run, and the read is over when `pending` reaches 0.
    std::vector<uint64_t> jobs;
    int pending = 0;
    int read_errno = 0;        // the read's first failure (a real one before ECANCELED)
    std::string read_error;    // its message
    int error_dir = -1;        // the placement folder that failed it; -1: the shard
    bool speculative = false;  // read by a prefetch and not requested since
    bool cancelled = false;    // kReading a guess stopped mid-read: empty once its pieces land
    bool used = false;         // requested at least once since it was read
    bool checked = false;      // MXFP4 scales validated
    int drive = -1;            // DriveTable index of the read in flight (or done); -1: striped
    uint64_t tried = 0;        // placement holders this load has tried (bit per holder)
    std::string error;         // kFailed: the whole message, naming layer and expert
    io::DirectFile file;       // with a fetcher: the cache file, open while kReading
    std::vector<io::DirectFile> pieces;  // a striped read's piece files, open while kReading
  };
  // A batch entry waiting for a slot.
  struct Waiter {
    Batch* batch;
    int layer;
    size_t index;
  };

  uint64_t key(int layer, int32_t expert) const {
    return static_cast<uint64_t>(layer) * n_experts_max_ + static_cast<uint64_t>(expert);
  }
  uint8_t* slot_data(int s) { return pool_.data() + static_cast<size_t>(s) * slot_stride_; }
  // The evictable slot to reuse (empty first, then least recently used); -1 when all are busy.
  // Caller holds mu_.
  int take_slot(bool for_prefetch);
  bool evict_before(const Slot& a, const Slot& b) const;  // caller holds mu_
  // Puts (layer, expert) into slot s and starts its fetch (not local yet) or its read. Caller
  // holds mu_; a failure to start leaves the slot kFailed.
  void start_load(int s, int layer, int32_t expert, io::ReadPriority priority);
  // Reads slot s's expert: its placed pieces or copies, else the shard or cache file; a demand
  // for an expert the pool lost (its copies failed) is fetched again. Caller holds mu_.
  void submit_read(int s);
  void start_fetch(int s);  // slot s's expert is fetched, then read; caller holds mu_
  // Whether a read of the expert goes to its placed pieces or a live holder. Caller holds mu_.
  bool placed_readable(int layer, int32_t expert) const;
  // Opens every piece file of a striped expert and submits one job per piece, each on its
  // folder's drive, into its offset of the slot. False (nothing submitted) when the expert is not
  // striped, or a folder has failed or fails now (reported): the caller reads another copy.
  // Caller holds mu_.
  bool submit_stripe(int s);
  // The expert's stripe when every piece's folder is live and its span size matches; else
  // nullptr. Caller holds mu_.
  const PlacedExpert* live_stripe(int layer, int32_t expert) const;
  // Stops a read's jobs that have not reached the device (CancelResult for the whole read: kDropped
  // when no callback is left to come). Caller holds mu_.
  io::CancelResult cancel_read(Slot& slot);
  // The live placement holder (not in `tried`) expected to finish a read of the expert first,
  // or -1 (no copy placed, or none left). Caller holds mu_.
  int choose_holder(int layer, int32_t expert, uint64_t tried) const;
  // A holder that failed: reported once, never read again. Caller holds mu_.
  void fail_holder(int h, const std::string& why);
  // The drive a read of the expert would go to now (prefetch allowance). Caller holds mu_.
  int planned_drive(int layer, int32_t expert) const;
  int prefetch_allowance(int drive) const;     // caller holds mu_
  void fail_slot(int s, std::string message);  // caller holds mu_
  // Job `j` of slot s's read landed; `dir` is the placement folder it read (-1: the shard).
  void on_read_done(int s, size_t j, int dir, const io::ReadCompletion& c);
  void on_fetch_done(int s, const std::string& error);
  // Hands freed slots to batch entries waiting for one. Caller holds mu_.
  void serve_waiters();
  void unpin(int s);
  // Guesses of `layer` outside `keep`: reads that have not reached the device yet are dropped.
  // With route_known (the layer's route is `keep`), the rest, read or being read, become ordinary
  // cache entries: left speculative they would stay protected from eviction and hold the prefetch
  // allowance until the lookahead starved (docs/STREAMING.md). Caller holds mu_.
  void retire_guesses(int layer, std::span<const int32_t> keep, bool route_known);

  // Fetch callbacks reach the store through this; the destructor detaches it, so a fetch that
  // completes later (it cannot be cancelled mid-transfer) finds no store and does nothing.
  struct FetchGuard {
    std::mutex mu;  // taken before mu_
    StreamingExpertStore* store = nullptr;
    int orphaned = 0;  // callbacks that found no store
  };

  ExpertCatalog catalog_;
  std::shared_ptr<io::ReadScheduler> scheduler_;
  StreamingStoreOptions options_;
  std::shared_ptr<ExpertFetcher> fetcher_;
  std::shared_ptr<FetchGuard> guard_;
  std::map<std::string, io::DirectFile> files_;  // by shard path (no fetcher)
  std::map<std::string, int> file_drive_;        // by shard path
  std::vector<int> holder_drive_;                // [placement holder] DriveTable index, -1 dead
  std::vector<bool> holder_failed_;
  uint64_t n_experts_max_ = 0;
  size_t slot_stride_ = 0;
  io::HugeBuffer pool_;  // pre-faulted: no read ever waits on a page fault

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, int> where_;  // key(layer, expert) → slot
  std::vector<Waiter> waiters_;
  uint64_t tick_ = 0;
  int reads_in_flight_ = 0;
  int speculative_slots_ = 0;                    // kReading or kReady with speculative set
  std::vector<std::vector<int32_t>> predicted_;  // [layer]: this pass's prediction
  std::vector<double> recall_;                   // [layer]: exponential average
  std::vector<uint32_t> uses_;                   // [key]: requests since load
  ExpertStoreStats stats_;
};

}  // namespace deltafin::experts
