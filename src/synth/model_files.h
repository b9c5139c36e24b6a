// The JSON files of a synthetic checkpoint in the release's form: config.json (the published
// field set, quantization_config inside text_config), generation_config.json and the shard index.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "format/config.h"
#include "synth/layout.h"

namespace deltafin::synth {

// The token ids config.json names. For synth models they sit at K3's offsets from base_vocab.
struct ConfigTokenIds {
  int bos = 0;
  int eos = 0;
  int pad = 0;
  int media_placeholder = 0;
};
ConfigTokenIds k3_relative_token_ids(int base_vocab);

std::string config_json(const SynthDims& dims, const ConfigTokenIds& ids);
// The config.json a synth run writes (K3's token ids), parsed as the engine parses it: the config
// the K3 schema's roster is resolved for.
format::ModelConfig synth_config(const SynthDims& dims);
std::string generation_config_json(const ConfigTokenIds& ids);

// model.safetensors.index.json, streamed: names in sorted order with their shard file, one layer's
// roster in memory at a time (a 93-layer K3 index has half a million entries).
void write_index_json(const SynthDims& dims, const format::ModelConfig& config,
                      const std::string& path);

void write_text_file(const std::string& path, const std::string& text);

}  // namespace deltafin::synth
