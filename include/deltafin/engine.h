// The public entry point: load a model folder, describe it, and open sessions on it. The CLI and
// the server use only this API; it carries ids and logits, never tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "deltafin/session.h"

namespace deltafin {

struct EngineOptions {
  std::string model_dir;
  int prefill_chunk_tokens = 64;  // rows per multi-row pass during prefill
};

struct ModelInfo {
  std::string arch;  // "kimi_k3", "kimi_linear"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t n_layers = 0;
  int64_t bos_id = -1, eos_id = -1, pad_id = -1;  // -1 when the config names none
};

class Engine {
 public:
  // Loads and checks the model; throws std::runtime_error (deltafin's Error) naming the file,
  // tensor or config field at fault.
  static std::unique_ptr<Engine> load(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const ModelInfo& info() const = 0;
  // A new, empty sequence. Sessions share the engine's weights and must not outlive it.
  virtual std::unique_ptr<Session> new_session() = 0;
};

}  // namespace deltafin
