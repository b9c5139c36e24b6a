// Streamed spine: which bytes each layer needs (recorded while building its plan), pre-faulting
// the resident part, and the two-buffer read-ahead of streamed layers.
#include "model/streamed_spine.h"

#include <algorithm>
#include <cerrno>
#include <set>

#include "base/error.h"
#include "base/stopwatch.h"

namespace deltafin::model {
namespace {

// Spine reads go in pieces so that the current layer's expert reads, which outrank them, never
// wait behind a whole layer.
constexpr size_t kSpinePieceBytes = size_t{16} << 20;

// One run of a spine layer as one job, read in pieces.
io::ReadJob spine_job(const SpineLayerReads::Run& run, const io::DirectFile* file, uint8_t* dest) {
  io::ReadJob job;
  job.file = file;
  job.offset = run.span.read_offset;
  job.length = run.span.read_length;
  job.required_bytes = run.span.required_bytes;
  job.dest = dest + run.buffer_offset;
  job.priority = io::ReadPriority::kNext;
  job.piece_bytes = kSpinePieceBytes;
  return job;
}

// Resolves through the mapping and records every tensor asked for.
class RecordingSource : public WeightSource {
 public:
  explicit RecordingSource(const format::Checkpoint& checkpoint) : checkpoint_(checkpoint) {}
  const format::TensorInfo& info(std::string_view name) const override {
    const format::TensorInfo& t = checkpoint_.get(name);
    seen_.insert(&t);
    return t;
  }
  const uint8_t* bytes(const format::TensorInfo& tensor) override {
    return checkpoint_.map(tensor).data();
  }
  std::set<const format::TensorInfo*> take() { return std::move(seen_); }

 private:
  const format::Checkpoint& checkpoint_;
  mutable std::set<const format::TensorInfo*> seen_;
};

// Resolves a streamed layer's tensors inside the buffer its reads landed in.
class BufferSource : public WeightSource {
 public:
  BufferSource(const format::Checkpoint& checkpoint, const SpineLayerReads& reads,
               const uint8_t* base, int64_t layer)
      : checkpoint_(checkpoint), reads_(reads), base_(base), layer_(layer) {}
  const format::TensorInfo& info(std::string_view name) const override {
    return checkpoint_.get(name);
  }
  const uint8_t* bytes(const format::TensorInfo& tensor) override {
    auto it = reads_.tensor_offset.find(&tensor);
    if (it == reads_.tensor_offset.end())
      base::fail("streamed spine layer ", layer_, ": tensor ", tensor.name,
                 " was not among the tensors recorded for it at load");
    return base_ + it->second;
  }

 private:
  const format::Checkpoint& checkpoint_;
  const SpineLayerReads& reads_;
  const uint8_t* base_;
  int64_t layer_;
};

SpineLayerReads plan_reads(std::vector<const format::TensorInfo*> tensors) {
  std::sort(tensors.begin(), tensors.end(), [](const auto* a, const auto* b) {
    return a->file != b->file ? a->file < b->file : a->offset < b->offset;
  });
  SpineLayerReads r;
  size_t i = 0;
  while (i < tensors.size()) {
    size_t j = i + 1;
    uint64_t end = tensors[i]->offset + tensors[i]->nbytes;
    while (j < tensors.size() && tensors[j]->file == tensors[i]->file &&
           tensors[j]->offset <= end + SpineLayerReads::kMaxGapBytes) {
      end = std::max(end, tensors[j]->offset + tensors[j]->nbytes);
      ++j;
    }
    SpineLayerReads::Run run;
    run.file = tensors[i]->file;
    run.file_offset = tensors[i]->offset;
    run.span = io::align_span(run.file_offset, end - run.file_offset);
    run.buffer_offset = r.read_bytes;
    for (size_t k = i; k < j; ++k) {
      r.tensor_offset[tensors[k]] =
          run.buffer_offset + run.span.data_offset + (tensors[k]->offset - run.file_offset);
      r.tensor_bytes += tensors[k]->nbytes;
    }
    r.read_bytes += run.span.read_length;
    r.runs.push_back(std::move(run));
    i = j;
  }
  return r;
}

}  // namespace

std::vector<SpineLayerReads> spine_layer_reads(const ModelPlan& plan,
                                               const format::Checkpoint& checkpoint) {
  std::vector<SpineLayerReads> out;
  out.reserve(plan.layers.size());
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    RecordingSource rec(checkpoint);
    build_layer_plan(plan, static_cast<int64_t>(l), rec);
    const std::set<const format::TensorInfo*> seen = rec.take();
    out.push_back(plan_reads({seen.begin(), seen.end()}));
  }
  return out;
}

std::vector<const format::TensorInfo*> global_spine_tensors(const ModelPlan& plan,
                                                            const format::Checkpoint& checkpoint) {
  RecordingSource rec(checkpoint);
  const ModelPlan again = build_plan(plan.config, rec);
  std::set<const format::TensorInfo*> all = rec.take();
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    RecordingSource layer(checkpoint);
    build_layer_plan(plan, static_cast<int64_t>(l), layer);
    for (const format::TensorInfo* t : layer.take()) all.erase(t);
  }
  std::vector<const format::TensorInfo*> out;
  for (const format::TensorInfo* t : all) {
    const bool embed = checkpoint.map(*t).data() == again.embed.data;
    if (!embed || again.lm_head.data == again.embed.data) out.push_back(t);
  }
  return out;
}

namespace {

// Reads every run of `reads` into `dest` now, in pieces, through the scheduler (so the device
// sees the usual queue depth), and waits. Throws base::Error naming the file on a failed read.
void read_now(const SpineLayerReads& reads, uint8_t* dest,
              std::map<std::string, io::DirectFile>& files, io::ReadScheduler& scheduler) {
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  std::string error;
  for (const SpineLayerReads::Run& run : reads.runs) {
    io::ReadJob job = spine_job(run, &files.at(run.file), dest);
    job.done = [&](const io::ReadCompletion& c) {
      std::lock_guard<std::mutex> lock(mu);
      if (!c.ok() && error.empty()) error = c.message;
      if (--pending == 0) cv.notify_all();
    };
    {
      std::lock_guard<std::mutex> lock(mu);
      ++pending;
    }
    scheduler.submit(std::move(job));
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return pending == 0; });
  if (!error.empty()) base::fail("reading the resident spine: ", error);
}

void open_files(const SpineLayerReads& reads, bool allow_direct,
                std::map<std::string, io::DirectFile>& files) {
  for (const SpineLayerReads::Run& run : reads.runs) {
    if (!files.contains(run.file))
      files.emplace(run.file, io::DirectFile::open(run.file, allow_direct));
  }
}

}  // namespace

StreamedSpine::StreamedSpine(const ModelPlan& plan, const format::Checkpoint& checkpoint,
                             std::vector<SpineLayerReads> reads, std::vector<bool> resident,
                             const std::vector<const format::TensorInfo*>& globals,
                             std::shared_ptr<io::ReadScheduler> scheduler, bool allow_direct)
    : plan_(plan),
      checkpoint_(checkpoint),
      reads_(std::move(reads)),
      resident_(std::move(resident)),
      scheduler_(std::move(scheduler)) {
  DF_ASSERT(reads_.size() == plan_.layers.size() && resident_.size() == plan_.layers.size());
  for (const SpineLayerReads& r : reads_) open_files(r, allow_direct, files_);
  pinned_.resize(reads_.size());
  for (size_t l = 0; l < reads_.size(); ++l) {
    if (resident_[l]) {
      Pinned& p = pinned_[l];
      p.memory = io::HugeBuffer(reads_[l].read_bytes);
      read_now(reads_[l], p.memory.data(), files_, *scheduler_);
      BufferSource source(checkpoint_, reads_[l], p.memory.data(), static_cast<int64_t>(l));
      p.plan = build_layer_plan(plan_, static_cast<int64_t>(l), source);
      resident_bytes_ += reads_[l].read_bytes;
      continue;
    }
    streamed_.push_back(static_cast<int64_t>(l));
    buffer_size_ = std::max<size_t>(buffer_size_, reads_[l].read_bytes);
    streamed_bytes_per_pass_ += reads_[l].read_bytes;
  }
  if (!globals.empty()) {
    global_reads_ = plan_reads(globals);
    open_files(global_reads_, allow_direct, files_);
    globals_.memory = io::HugeBuffer(global_reads_.read_bytes);
    read_now(global_reads_, globals_.memory.data(), files_, *scheduler_);
    resident_bytes_ += global_reads_.read_bytes;
  }
  if (!streamed_.empty()) {
    for (Buffer& b : buffers_) b.memory = io::HugeBuffer(buffer_size_);
  }
}

const uint8_t* StreamedSpine::global(const format::TensorInfo& tensor) const {
  auto it = global_reads_.tensor_offset.find(&tensor);
  DF_ASSERT(it != global_reads_.tensor_offset.end());
  return globals_.memory.data() + it->second;
}

StreamedSpine::~StreamedSpine() {
  std::unique_lock<std::mutex> lock(mu_);
  for (Buffer& b : buffers_) {
    // A job stopped part-way calls back (ECANCELED) once its pieces in flight land.
    for (uint64_t job : b.jobs) {
      if (scheduler_->cancel(job) == io::CancelResult::kDropped) --b.pending;
    }
  }
  cv_.wait(lock, [&] { return buffers_[0].pending == 0 && buffers_[1].pending == 0; });
}

int StreamedSpine::find(int64_t layer) const {
  for (int i = 0; i < 2; ++i) {
    if (buffers_[i].layer == layer) return i;
  }
  return -1;
}

int64_t StreamedSpine::next_streamed(int64_t layer) const {
  auto it = std::upper_bound(streamed_.begin(), streamed_.end(), layer);
  return it == streamed_.end() ? streamed_.front() : *it;
}

void StreamedSpine::start_load(int64_t layer) {
  int bi = find(-1);
  if (bi < 0) return;
  Buffer& b = buffers_[bi];
  b.layer = layer;
  b.error.clear();
  b.jobs.clear();
  for (const SpineLayerReads::Run& run : reads_[layer].runs) {
    io::ReadJob job = spine_job(run, &files_.at(run.file), b.memory.data());
    job.trace_layer = static_cast<int>(layer);
    job.done = [this, bi](const io::ReadCompletion& c) {
      std::lock_guard<std::mutex> lock(mu_);
      Buffer& buf = buffers_[bi];
      stats_.bytes_read += c.bytes;
      if (!c.ok() && buf.error.empty()) buf.error = c.message;
      if (--buf.pending == 0) cv_.notify_all();
    };
    ++b.pending;
    b.jobs.push_back(scheduler_->submit(std::move(job)));
  }
  ++stats_.layers_read;
}

void StreamedSpine::begin_pass() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.passes;
  if (streamed_.empty()) return;
  if (find(streamed_.front()) < 0) start_load(streamed_.front());
}

const LayerPlan& StreamedSpine::acquire(int64_t layer) {
  if (resident_[layer]) return *pinned_[layer].plan;
  std::unique_lock<std::mutex> lock(mu_);
  int bi = find(layer);
  if (bi < 0) {
    // Both buffers hold other layers (a pass that ended early): free one and load this layer.
    if (find(-1) < 0) {
      const int victim = buffers_[0].in_use ? 1 : 0;
      cv_.wait(lock, [&] { return buffers_[victim].pending == 0; });
      buffers_[victim].layer = -1;
    }
    start_load(layer);
    bi = find(layer);
    DF_ASSERT(bi >= 0);
  }
  Buffer& b = buffers_[bi];
  if (b.pending > 0) {
    const base::Stopwatch waited;
    cv_.wait(lock, [&] { return b.pending == 0; });
    stats_.wait_seconds += waited.elapsed_seconds();
  }
  if (!b.error.empty()) {
    const std::string error = b.error;
    b.layer = -1;
    base::fail("streamed spine layer ", layer, ": ", error);
  }
  b.in_use = true;
  lock.unlock();
  try {
    BufferSource source(checkpoint_, reads_[layer], b.memory.data(), layer);
    b.plan = build_layer_plan(plan_, layer, source);
  } catch (...) {
    lock.lock();
    b.in_use = false;
    b.layer = -1;
    throw;
  }
  lock.lock();
  const int64_t next = next_streamed(layer);
  if (next != layer && find(next) < 0) start_load(next);
  return *b.plan;
}

void StreamedSpine::release(int64_t layer) {
  if (resident_[layer]) return;
  std::lock_guard<std::mutex> lock(mu_);
  const int bi = find(layer);
  DF_ASSERT(bi >= 0 && buffers_[bi].in_use);
  Buffer& b = buffers_[bi];
  b.in_use = false;
  b.plan.reset();
  b.layer = -1;
  const int64_t next = next_streamed(layer);
  if (find(next) < 0) start_load(next);
}

SpineStats StreamedSpine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace deltafin::model
