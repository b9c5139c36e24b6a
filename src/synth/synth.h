// `deltafin synth`: writes a complete model folder in the exact K3 release layout with seeded
// random weights, streamed so that memory stays small whatever the size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "format/config.h"
#include "synth/drafters.h"
#include "synth/layout.h"
#include "synth/plant.h"

namespace deltafin::synth {

struct SynthOptions {
  std::string out_dir;
  std::string preset;          // "demo" or "k3-scale"
  std::optional<int> layers;   // total layers, dense layer 0 included
  std::optional<int> experts;  // routed experts per MoE layer
  uint64_t seed = 0;
  bool drafters = true;  // MODEL/drafters/dspark and the Qwen3 drafter (drafters.h)
  QwenSize qwen = QwenSize::k0_6b;
  // --plant-cycles: one planted cycle per length (plant.h); empty: plain random weights.
  std::vector<int> plant_cycles;
};

// The sizes the options ask for (preset, then --layers / --experts; top-k capped at the expert
// count), validated. Throws base::Error on an unknown preset or invalid sizes.
SynthDims resolve_dims(const SynthOptions& options);

struct SynthReport {
  SynthDims dims;
  format::ModelConfig config;  // what config.json says
  int n_shards = 0;
  uint64_t tensor_bytes = 0;  // index.json's total_size
  uint64_t file_bytes = 0;    // all shards, headers included
  double seconds = 0.0;
  bool drafters = false;
  DrafterReport drafter;  // when drafters
  PlantedCycles planted;  // empty unless plant_cycles
};

// Writes config.json, generation_config.json, tiktoken.model, tokenizer_config.json, the shards,
// the drafters (with drafters off, an earlier run's drafters are removed: their weights would not
// match) and model.safetensors.index.json (last, so an interrupted run leaves no index). Shards and
// the index of an earlier synth run in the same folder are replaced. With plant_cycles, the values
// are planted (plant.h) and planted_cycles.json is written; without, an earlier one is removed.
// Throws base::Error (for example when the disk has too little free space for the whole model).
SynthReport synthesize(const SynthOptions& options);

}  // namespace deltafin::synth
