// The GPU model's passes: placement by tiers, sequences, the layer loop with the residual
// stream's AttnRes bookkeeping (model/model.cc and model/attn_res.cc, mirrored; streamed layers
// taken from the staging), the head, and the verify pass's commit (KDA replayed from the saved
// state, MLA truncated).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/gpu_internal.h"
#include "cuda/norm.h"

namespace deltafin::cuda {
namespace {

// Allocates `bytes` on the current device; an error names the part and the flag that changes it.
void* allocate(uint64_t bytes, const std::string& part) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, std::max<uint64_t>(bytes, 256));
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    throw std::runtime_error(
        "CUDA backend: " + std::string(part) + " (" + std::to_string(bytes) +
        " bytes) does not fit in VRAM (" + std::to_string(free_bytes) + " bytes free of " +
        std::to_string(total) +
        "); lower --vram-budget, use --device cpu, or a smaller --max-context");
  }
  check_cuda(err, part.c_str());
  return p;
}

}  // namespace

GpuSequence::~GpuSequence() = default;

GpuModel::GpuModel(const GpuModelDesc& desc, int device, const GpuLimits& limits,
                   const TierPlan& tiers, std::unique_ptr<ExpertSource> source)
    : shape_(desc.shape), limits_(limits), tiers_(tiers), device_(device) {
  check_gpu_shapes(desc);
  if (limits.max_positions < 1) throw std::invalid_argument("CUDA backend: max_positions < 1");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  // Each allocation is owned as soon as it is made, so a refusal part-way frees what was taken.
  w_ = std::make_unique<GpuWeights>();
  ws_ = std::make_unique<GpuWorkspace>();
  const int64_t resident = tiers.resident_layers;
  Arena spine, experts, work;
  spine.base = static_cast<uint8_t*>(
      allocate(tiers.global_bytes + tiers.resident_spine_bytes + tiers.staging_bytes,
               tiers.whole ? "the spine" : "the globals, resident spine layers and spine staging"));
  w_->spine_base = spine.base;
  experts.base = static_cast<uint8_t*>(allocate(
      tiers.expert_bytes, tiers.whole ? "the routed experts"
                                      : "the expert cache (" + std::to_string(tiers.expert_slots) +
                                            " slots, --vram-expert-slots)"));
  w_->expert_base = experts.base;
  work.base = static_cast<uint8_t*>(allocate(tiers.workspace_bytes, "the pass workspace"));
  ws_->base = work.base;
  if (tiers.whole) {
    place_weights(desc, spine, experts, w_.get());
  } else {
    // Globals, then the resident layers, then the staging: one allocation, carved in that order.
    place_globals(desc, spine, w_.get());
    for (int64_t l = 0; l < resident; ++l) {
      Arena count, conv;
      place_layer(desc, l, count, conv);
      w_->layer_bytes.push_back(count.used);
      w_->layers.push_back(place_layer(desc, l, spine, spine));
    }
    if (resident < tiers.n_layers) {
      uint8_t* staging = spine.base + tiers.global_bytes + tiers.resident_spine_bytes;
      spine_ = std::make_unique<SpineStream>(desc, resident, staging, tiers.staging_bytes / 2,
                                             spine, &w_->layers, device,
                                             std::max<int64_t>(tiers.spine_ring_buffers, 1));
      w_->layer_bytes.resize(tiers.n_layers, 0);
    }
    if (spine.used != tiers.global_bytes + tiers.resident_spine_bytes)
      throw std::logic_error("CUDA backend: spine layout differs from its plan");
    if (tiers.expert_slots > 0) {
      if (!source) source = mapped_expert_source(desc, tiers.expert_slot_bytes);
      cache_ = std::make_unique<DevExpertCache>(desc, tiers.expert_slots, tiers.expert_slot_bytes,
                                                experts.base, std::move(source));
    }
  }
  place_workspace(desc, limits, work, ws_.get());
  ws_->meter.set_model(pass_byte_model(desc, tiers_));
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

GpuModel::~GpuModel() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  cache_.reset();  // its copies finish before the slab they write is freed
  spine_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}  // w_ and ws_ free their allocations

GpuTierStats GpuModel::tier_stats() const {
  std::lock_guard<std::mutex> lock(tier_stats_mu_);
  return tier_stats_;
}

std::unique_ptr<GpuSequence> GpuModel::new_sequence() {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  std::unique_ptr<GpuSequence> seq(new GpuSequence());
  seq->state_ = std::make_unique<GpuSequenceState>();
  Arena a;
  a.base = static_cast<uint8_t*>(allocate(tiers_.sequence_bytes, "a sequence's state"));
  seq->state_->base = a.base;
  seq->state_->device = device_;
  place_sequence(shape_, w_->layers, limits_, a, seq->state_.get());
  if (a.used != tiers_.sequence_bytes)
    throw std::logic_error("CUDA backend: sequence layout differs from its plan");
  reset(*seq);
  return seq;
}

void GpuModel::reset(GpuSequence& seq) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const int64_t p = shape_.kda_heads * shape_.kda_dim;
  for (DevKdaState& k : seq.state_->kda) {
    check_cuda(
        cudaMemsetAsync(k.s, 0, shape_.kda_heads * shape_.kda_dim * shape_.kda_dim * sizeof(float),
                        stream_),
        "reset");
    check_cuda(
        cudaMemsetAsync(k.conv, 0, 3 * (shape_.conv_kernel - 1) * p * sizeof(float), stream_),
        "reset");
  }
  check_cuda(cudaStreamSynchronize(stream_), "reset");
  seq.n_positions_ = 0;
  seq.tentative_rows_ = 0;
}

void GpuModel::forward(GpuSequence& seq, const int32_t* ids, int64_t n, bool all_rows,
                       float* logits, bool tentative, const std::function<bool()>* cancel) {
  if (n < 1) throw std::invalid_argument("CUDA backend: a pass needs at least one id");
  if (seq.tentative_rows_ > 0)
    throw std::logic_error("a verify pass's rows are still tentative: commit them first");
  if (seq.n_positions_ + n > limits_.max_positions)
    throw std::runtime_error("CUDA backend: the sequence would hold " +
                             std::to_string(seq.n_positions_ + n) + " positions, beyond the " +
                             std::to_string(limits_.max_positions) + " planned (--max-context)");
  if (tentative && n > limits_.max_tentative_rows)
    throw std::invalid_argument("CUDA backend: a verify pass of " + std::to_string(n) +
                                " rows; the sequences log at most " +
                                std::to_string(limits_.max_tentative_rows));
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= shape_.vocab)
      throw std::invalid_argument("token id " + std::to_string(ids[i]) +
                                  " is outside the vocabulary [0, " + std::to_string(shape_.vocab) +
                                  ")");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  if (tentative) {
    const int64_t p = shape_.kda_heads * shape_.kda_dim;
    for (DevKdaState& k : seq.state_->kda) {
      check_cuda(cudaMemcpyAsync(k.s_saved, k.s,
                                 shape_.kda_heads * shape_.kda_dim * shape_.kda_dim * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream_),
                 "save KDA state");
      check_cuda(
          cudaMemcpyAsync(k.conv_saved, k.conv, 3 * (shape_.conv_kernel - 1) * p * sizeof(float),
                          cudaMemcpyDeviceToDevice, stream_),
          "save KDA conv state");
    }
  }
  for (int64_t begin = 0; begin < n; begin += kGpuMaxBatch) {
    const int64_t len = std::min<int64_t>(kGpuMaxBatch, n - begin);
    const bool last = begin + len == n;
    if (all_rows) {
      pass(seq, ids + begin, len, 0, logits + begin * shape_.vocab, tentative, begin, cancel);
    } else {
      // Only the last row's logits are wanted: earlier passes skip the head.
      pass(seq, ids + begin, len, last ? len - 1 : len, logits, tentative, begin, cancel);
    }
  }
  if (tentative) seq.tentative_rows_ = n;
}

void GpuModel::pass(GpuSequence& seq, const int32_t* ids, int64_t n, int64_t first, float* logits,
                    bool tentative, int64_t log_offset, const std::function<bool()>* cancel) {
  GpuWorkspace& ws = *ws_;
  const GpuShape& sh = shape_;
  const int64_t d = sh.hidden;
  GpuTierStats moved;  // this pass's, added to tier_stats_ at its end
  const PassContext c{sh, limits_, ws, stream_, cache_.get(), &moved};
  ws.meter.start(stream_);
  count_copy();
  check_cuda(cudaMemcpyAsync(ws.ids, ids, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
             "ids");
  embed_rows(w_->embed.bf16.data, d, ws.ids, n, ws.partial, stream_);
  ws.n = n;
  ws.n_blocks = 0;
  ws.restart = false;
  const int64_t stride = kGpuMaxBatch * d;
  // The residual stream (model/attn_res.cc): mix the stored blocks and the partial sum.
  const auto mix = [&](const float* key, int64_t row0, int64_t rows, float* out) {
    if (ws.n_blocks == 0) {
      count_copy();
      check_cuda(cudaMemcpyAsync(out, ws.partial + row0 * d, rows * d * sizeof(float),
                                 cudaMemcpyDeviceToDevice, stream_),
                 "residual copy");
    } else {
      attn_res_mix(key, ws.blocks + row0 * d, ws.n_blocks, stride, ws.partial + row0 * d, rows, d,
                   sh.rms_eps, ws.res, out, stream_);
    }
  };
  const auto add_to_stream = [&](const float* y) {
    if (ws.restart) {
      count_copy();
      check_cuda(
          cudaMemcpyAsync(ws.partial, y, n * d * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
          "residual restart");
      ws.restart = false;
    } else {
      add(y, n * d, ws.partial, stream_);
    }
  };
  const int64_t n_layers = static_cast<int64_t>(w_->layers.size());
  for (int64_t l = 0; l < n_layers; ++l) {
    if (l > 0 && cancel && (*cancel)()) throw GpuPassCancelled{};
    const bool streamed = spine_ && l >= spine_->first();
    const DevLayer& L =
        streamed ? spine_->acquire(l, stream_, &moved.streamed_spine_bytes) : w_->layers[l];
    moved.resident_spine_bytes += w_->layer_bytes[l];
    mix(L.attn_res, 0, n, ws.x);
    if (sh.attn_res_block > 0 && l % sh.attn_res_block == 0) {
      count_copy();
      check_cuda(cudaMemcpyAsync(ws.blocks + ws.n_blocks * stride, ws.partial,
                                 n * d * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
                 "residual block");
      ++ws.n_blocks;
      ws.restart = true;
    }
    rmsnorm_rows(ws.x, L.input_norm, n, d, sh.rms_eps, ws.x, stream_);
    if (L.kda) {
      kda_block(c, L.kda_w, seq.state_->kda[L.state_index], ws.x, n, ws.y, tentative, log_offset);
    } else {
      mla_block(c, L.mla_w, seq.state_->mla[L.state_index], seq.n_positions_, ws.x, n, ws.y);
    }
    add_to_stream(ws.y);
    mix(L.mlp_res, 0, n, ws.x);
    rmsnorm_rows(ws.x, L.post_norm, n, d, sh.rms_eps, ws.x, stream_);
    if (L.moe) {
      if (moe_block(c, L.moe_w, l, ws.x, n, ws.y)) {
        ws.meter.count_experts(l, ws.host_route);
      } else {
        ws.meter.count_distinct_experts(l, sh.router.top_k);  // one row's: all distinct
      }
    } else {
      glu_block(c, L.dense, ws.x, n, ws.y);
    }
    if (streamed) spine_->release(l, stream_, &moved.streamed_spine_bytes);
    add_to_stream(ws.y);
  }
  seq.n_positions_ += n;
  const int64_t rows = n - first;
  if (rows > 0) {
    mix(w_->output_res, first, rows, ws.x);
    rmsnorm_rows(ws.x, w_->final_norm, rows, d, sh.rms_eps, ws.y, stream_);
    mm(w_->lm_head, ws.y, rows, ws.logits, stream_);
    count_copy();
    check_cuda(cudaMemcpyAsync(logits, ws.logits, rows * sh.vocab * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_),
               "logits");
  }
  ws.meter.stop(stream_);
  count_sync();
  check_cuda(cudaStreamSynchronize(stream_), "pass");
  ws.meter.finish(n, rows, seq.n_positions_);
  if (spine_) spine_->finish_pass(&moved.spine_h2d_seconds, &moved.spine_fill_wait_seconds);
  std::lock_guard<std::mutex> lock(tier_stats_mu_);
  tier_stats_.spine_h2d_seconds += moved.spine_h2d_seconds;
  tier_stats_.spine_fill_wait_seconds += moved.spine_fill_wait_seconds;
  tier_stats_.expert_h2d_seconds += moved.expert_h2d_seconds;
  if (cache_) tier_stats_.source = cache_->source_stats();
  ++tier_stats_.passes;
  tier_stats_.resident_spine_bytes += moved.resident_spine_bytes;
  tier_stats_.streamed_spine_bytes += moved.streamed_spine_bytes;
  tier_stats_.expert_hits += moved.expert_hits;
  tier_stats_.expert_misses += moved.expert_misses;
  tier_stats_.expert_hit_bytes += moved.expert_hit_bytes;
  tier_stats_.expert_miss_bytes += moved.expert_miss_bytes;
}

void GpuModel::commit(GpuSequence& seq, int64_t keep) {
  if (keep < 0 || keep > seq.tentative_rows_)
    throw std::invalid_argument("CUDA backend: commit of " + std::to_string(keep) + " rows, " +
                                std::to_string(seq.tentative_rows_) + " tentative");
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const int64_t drop = seq.tentative_rows_ - keep;
  if (drop > 0) {
    // The state holds every row of the pass: start again from before it and replay the kept
    // rows with the same kernels (n rows in one call equal n decode steps, bit for bit).
    const PassContext c{shape_, limits_, *ws_, stream_, nullptr, nullptr};  // replay: no MoE
    for (const DevLayer& L : w_->layers)
      if (L.kda) kda_replay(c, L.kda_w, seq.state_->kda[L.state_index], keep);
    check_cuda(cudaStreamSynchronize(stream_), "commit");
  }
  // MLA positions past the kept rows are simply overwritten by the next pass.
  seq.n_positions_ -= drop;
  seq.tentative_rows_ = 0;
}

}  // namespace deltafin::cuda
