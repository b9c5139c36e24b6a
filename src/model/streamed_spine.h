// The spine split into resident and streamed layers, none of it in the page cache. Resident layers
// (and the global tensors, lm_head above all) are read once with O_DIRECT into huge-page memory
// this process owns, so no other memory demand can evict them and make decode re-read them
// through page faults (DESIGN rule 3); each streamed layer is read with O_DIRECT into one of two
// huge-page buffers while the layer before it computes. Every layer's plan is rebuilt over the
// memory its bytes landed in, with the same checks as at load.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/checkpoint.h"
#include "io/direct_file.h"
#include "io/huge_buffer.h"
#include "io/read_scheduler.h"
#include "model/layer_source.h"
#include "model/plan.h"

namespace deltafin::model {

// One layer's spine tensors (everything build_layer_plan resolves; no routed experts) as the
// aligned reads that cover them: tensors of one file closer than kMaxGapBytes share one read.
struct SpineLayerReads {
  static constexpr uint64_t kMaxGapBytes = 1 << 20;
  struct Run {
    std::string file;
    uint64_t file_offset = 0;  // of the first byte wanted
    io::AlignedSpan span;      // the read that covers [file_offset, file_offset + length)
    size_t buffer_offset = 0;  // where the read lands in the layer's buffer
  };
  std::vector<Run> runs;
  std::unordered_map<const format::TensorInfo*, size_t> tensor_offset;  // into the buffer
  uint64_t tensor_bytes = 0;                                            // the tensors themselves
  uint64_t read_bytes = 0;  // what the runs read (= the buffer size)
};

// Per layer, the reads that cover its spine tensors (recorded by building its plan).
std::vector<SpineLayerReads> spine_layer_reads(const ModelPlan& plan,
                                               const format::Checkpoint& checkpoint);

// The global tensors the forward pass reads in full every pass (lm_head, final norm, output
// mix); not the embedding, of which a pass touches only its rows (unless lm_head is tied to it).
std::vector<const format::TensorInfo*> global_spine_tensors(const ModelPlan& plan,
                                                            const format::Checkpoint& checkpoint);

struct SpineStats {
  uint64_t passes = 0;
  uint64_t bytes_read = 0;
  uint64_t layers_read = 0;
  double wait_seconds = 0;  // acquire() blocked on reads
};

class StreamedSpine : public LayerSource {
 public:
  // `plan` and `checkpoint` must outlive this. `resident[l]` says which layers are read now and
  // kept; the rest stream through two buffers of the largest streamed layer. `globals` are read
  // now and kept too (see global()). Throws base::Error naming the file when a read fails.
  StreamedSpine(const ModelPlan& plan, const format::Checkpoint& checkpoint,
                std::vector<SpineLayerReads> reads, std::vector<bool> resident,
                const std::vector<const format::TensorInfo*>& globals,
                std::shared_ptr<io::ReadScheduler> scheduler, bool allow_direct = true);
  ~StreamedSpine() override;  // waits for its reads in flight

  void begin_pass() override;
  const LayerPlan& acquire(int64_t layer) override;
  void release(int64_t layer) override;
  double wait_seconds() const override { return stats().wait_seconds; }

  SpineStats stats() const;
  // Where one of the global tensors given at construction lives now.
  const uint8_t* global(const format::TensorInfo& tensor) const;
  uint64_t resident_bytes() const { return resident_bytes_; }  // layers and globals, as read
  uint64_t streamed_bytes_per_pass() const { return streamed_bytes_per_pass_; }

 private:
  struct Buffer {
    io::HugeBuffer memory;
    int64_t layer = -1;   // loaded or loading; -1 free
    int pending = 0;      // reads not yet finished
    bool in_use = false;  // between acquire and release
    std::string error;
    std::vector<uint64_t> jobs;
    std::optional<LayerPlan> plan;
  };

  int find(int64_t layer) const;   // buffer holding or loading `layer`, or -1; caller holds mu_
  void start_load(int64_t layer);  // into a free buffer if there is one; caller holds mu_
  int64_t next_streamed(int64_t layer) const;

  // A resident layer (or the globals): its bytes and the plan over them.
  struct Pinned {
    io::HugeBuffer memory;
    std::optional<LayerPlan> plan;
  };

  const ModelPlan& plan_;
  const format::Checkpoint& checkpoint_;
  std::vector<SpineLayerReads> reads_;
  std::vector<bool> resident_;
  std::vector<int64_t> streamed_;  // streamed layers in forward order
  std::shared_ptr<io::ReadScheduler> scheduler_;
  std::map<std::string, io::DirectFile> files_;
  std::vector<Pinned> pinned_;  // [layer]: resident layers only
  SpineLayerReads global_reads_;
  Pinned globals_;
  uint64_t resident_bytes_ = 0;
  size_t buffer_size_ = 0;
  uint64_t streamed_bytes_per_pass_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Buffer buffers_[2];
  SpineStats stats_;
};

}  // namespace deltafin::model
