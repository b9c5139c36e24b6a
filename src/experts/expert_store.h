// The interface the MoE block gets routed experts through: say which experts a layer needs as soon
// as the route is known, then take them in whatever order they become ready. Behind it sit the
// checkpoint mapping (MappedExpertStore) and, later, streamed reads and caches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "format/inventory.h"
#include "format/schema.h"
#include "kernels/weight_matrix.h"

namespace deltafin::experts {

using kernels::WeightMatrix;

// One expert's three matrices, viewed in their stored dtype. For a latent MoE the expert width is
// routed_expert_hidden_size, otherwise hidden_size.
struct ExpertWeights {
  WeightMatrix gate;  // w1: [moe_intermediate, width], row-major
  WeightMatrix down;  // w2: [width, moe_intermediate], row-major
  WeightMatrix up;    // w3: [moe_intermediate, width], row-major
};

// Where one matrix of an expert sits inside the expert's byte span (offsets from the span start).
struct ExpertMatrixLayout {
  kernels::WeightDType dtype = kernels::WeightDType::kBF16;  // MXFP4: packed + scales
  uint64_t data_offset = 0;
  uint64_t scales_offset = 0;  // MXFP4 only
  int64_t rows = 0;
  int64_t cols = 0;
};

// The layout of every expert of one layer: all experts of a layer share shapes and dtypes, and the
// release stores each expert's tensors back to back, so the offsets are the same for all of them.
struct ExpertLayout {
  ExpertMatrixLayout gate, down, up;
  uint64_t span_bytes = 0;  // bytes from the first tensor's start to the last one's end
};

// The layout the family's expert schema gives, with each schema tensor at its offset from the
// span start (parallel to schema.tensors).
ExpertLayout expert_layout(const format::ExpertSchema& schema,
                           const std::vector<uint64_t>& tensor_offsets, uint64_t span_bytes);

// Every routed expert of the model: per MoE layer its layout and each expert's span (by id).
// Layers without routed experts have an empty `spans`.
struct ExpertCatalog {
  struct Layer {
    ExpertLayout layout;
    std::vector<format::ExpertSpan> spans;  // index = expert id: one read covers the expert
  };
  std::vector<Layer> layers;  // index = layer
};

// Views the three matrices of an expert whose span starts at `base`.
ExpertWeights view_expert(const ExpertLayout& layout, const uint8_t* base);

// Throws base::Error naming the layer and expert if an MXFP4 scale byte is 255 (NaN in OCP MX).
void check_expert_scales(const ExpertWeights& weights, int layer, int expert);

struct ReadyExpert {
  size_t index = 0;  // position in the list given to request()
  int32_t expert = 0;
  ExpertWeights weights;
};

// The experts one MoE call asked for. Hands each out once, in the order the store has them ready;
// the caller must not let that order reach its results (sum contributions in a fixed order).
class ExpertBatch {
 public:
  virtual ~ExpertBatch() = default;  // releases whatever is still held
  virtual size_t size() const = 0;
  // Blocks until one more requested expert is ready. Call exactly size() times.
  virtual ReadyExpert acquire_next() = 0;
  // The caller is done with the expert at `index`; its view becomes invalid.
  virtual void release(size_t index) = 0;
};

// Cumulative counters of a store; a store that never reads leaves the byte figures at 0.
struct ExpertStoreStats {
  uint64_t experts_requested = 0;  // (layer, expert) pairs asked of request()
  // In memory from an earlier use, or read for an earlier route's guess that the route passed over
  // (it was in memory before this route's pass began).
  uint64_t cache_hits = 0;
  uint64_t prefetch_hits = 0;  // brought in, or on its way, because of a prefetch
  uint64_t demand_reads = 0;   // read because request() asked for it
  uint64_t bytes_read = 0;     // everything read, unused prefetches included
  // Bytes of requested experts that were not in memory from an earlier use or an earlier route's
  // guess (demand reads and prefetch hits): what the route itself needed from disk, the I/O
  // floor's share.
  uint64_t needed_bytes = 0;
  uint64_t prefetch_reads = 0;      // speculative reads issued
  uint64_t prefetch_cancelled = 0;  // dropped before reaching the device
  uint64_t prefetch_stopped = 0;    // missed the route part-way read: its other pieces dropped
  uint64_t prefetch_wasted = 0;     // read, then evicted without being requested
  // Lookahead quality over layers where a prediction was made: recall = matched / actual.
  uint64_t predicted_actual = 0;
  uint64_t predicted_matched = 0;
  double wait_seconds = 0;  // time acquire_next() blocked on reads (and fetches)
  // Streaming installs: experts a demand found missing locally and fetched over the network.
  // Predictions never fetch (see StreamingExpertStore::prefetch).
  uint64_t experts_fetched = 0;
};

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  // Announces that `layer` needs `experts` (distinct ids) now; reads may start immediately.
  virtual std::unique_ptr<ExpertBatch> request(int layer, std::span<const int32_t> experts) = 0;
  // A forward pass over n_rows ids starting at `position` begins (traces, statistics).
  virtual void begin_pass(int64_t position, int64_t n_rows) {
    (void)position;
    (void)n_rows;
  }
  // A guess that `layer` will need `experts` soon. A store that reads may start reading them
  // when that is likely to pay; what request() hands out never depends on it.
  virtual void prefetch(int layer, std::span<const int32_t> experts) {
    (void)layer;
    (void)experts;
  }
  virtual ExpertStoreStats stats() const { return {}; }
};

}  // namespace deltafin::experts
