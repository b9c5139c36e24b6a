// The engine's device choice (--device auto|cpu|cuda[:N], --vram-budget) and the GPU backend a
// session runs its passes on, the model placed in VRAM by tiers (src/cuda/gpu_model.h). In a
// build without CUDA, asking for cuda is an error and auto is the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>

#include "deltafin/engine.h"
#include "model/model.h"

namespace deltafin::runtime {

struct DeviceRequest {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // cuda:N; -1: the first device
};
// "auto", "cpu", "cuda", "cuda:N"; throws base::Error naming --device otherwise.
DeviceRequest parse_device(const std::string& text);

// One sequence on the GPU: the session's passes (model::Model::forward's contract, without taps).
class GpuSession {
 public:
  virtual ~GpuSession() = default;
  // Throws model::PassCancelled when `cancel` stopped it between two layers.
  virtual void forward(std::span<const int32_t> ids, bool all_rows, float* logits, bool tentative,
                       const std::function<bool()>* cancel) = 0;
  virtual void commit(int64_t keep) = 0;
  // Where the session keeps the host buffers forward() writes logits into: memory the device
  // copies into by DMA (pinned) where the backend has it.
  virtual std::pmr::memory_resource* host_memory() { return std::pmr::get_default_resource(); }
  virtual void reset() = 0;
  virtual int64_t n_positions() const = 0;
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  virtual model::Model& model() = 0;  // the host side: config, plan (weights mapped, not read)
  virtual std::unique_ptr<GpuSession> new_session() = 0;
  virtual const MemoryPlanInfo& info() const = 0;
  // The VRAM tiers' counters since load (the gpu_* fields; Engine::stream_stats, --stats).
  virtual StreamStats tier_stats() const = 0;
  // The passes' counters since load: bytes touched, operations (Engine::gpu_stats, bench decode).
  virtual GpuStats pass_counters() const = 0;
};

// What `options.device` asks for, resolved: the GPU backend, or null when the CPU runs it (asked
// for, auto without a usable GPU or without room for the tiers' plan; `*why` says which).
// Throws base::Error when cuda was asked for and cannot be had, naming what did not fit and the
// flag that changes it. max_context: the resolved context a session may reach.
std::unique_ptr<GpuBackend> load_gpu_backend(const EngineOptions& options, int64_t max_context,
                                             std::string* why);

}  // namespace deltafin::runtime
