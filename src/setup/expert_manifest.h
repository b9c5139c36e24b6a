// Where each routed expert of a remote checkpoint lives: its remote shard, the byte offset of its
// contiguous six-tensor span, and the layout of the tensors inside a span (shared by all experts
// of a layer). A streaming install keeps this as .deltafin/experts.json; the expert store and
// `deltafin fetch-experts` use it to fetch, verify and read experts by (layer, expert).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/config.h"
#include "format/dtype.h"
#include "format/safetensors.h"

namespace deltafin::setup {

// One tensor of an expert, relative to the start of the expert's span.
struct ExpertTensorLayout {
  std::string suffix;  // "w1.weight_packed": the name after "...experts.<id>."
  format::DType dtype;
  std::vector<int64_t> shape;  // as stored, e.g. [3072, 1792] for K3's w1.weight_packed
  uint64_t offset = 0;         // from the span's first byte
  uint64_t nbytes = 0;
};

struct RemoteFile {
  std::string name;    // "model-00001-of-000096.safetensors"
  uint64_t size = 0;   // bytes of the whole remote file
  std::string sha256;  // lowercase hex when the repository publishes it, else empty
};

struct ExpertLayer {
  int64_t layer = 0;
  std::string prefix;  // "language_model.model.layers.5.block_sparse_moe.experts."
  uint64_t span_bytes = 0;
  std::vector<ExpertTensorLayout> layout;  // in file order
  std::vector<uint32_t> file;              // [n_experts]: index into ExpertManifest::files
  std::vector<uint64_t> offset;            // [n_experts]: absolute offset of the span in that file
  int64_t n_experts() const { return static_cast<int64_t>(offset.size()); }
};

struct ExpertManifest {
  std::vector<RemoteFile> files;
  std::vector<ExpertLayer> layers;  // MoE layers only, ascending by layer

  const ExpertLayer* find_layer(int64_t layer) const;  // nullptr for a layer without experts
  int64_t n_experts() const;
  uint64_t total_bytes() const;

  std::string to_json() const;
  // Throws base::Error naming the file and field.
  static ExpertManifest parse(const std::string& json_text, const std::string& path_for_errors);
};

struct ExpertSplit {
  ExpertManifest manifest;
  std::vector<bool> is_expert;  // parallel to the tensors given: true for routed-expert tensors
};

// Finds the routed experts of `config` among `tensors` (TensorInfo::file is the remote file
// name), checking that each expert's tensors exist, sit back to back in one file in the order
// format::expert_tensor_suffixes gives, and share the layout of their layer. Throws base::Error
// naming the layer, expert and tensor otherwise.
ExpertSplit split_experts(const format::ModelConfig& config,
                          const std::vector<format::TensorInfo>& tensors,
                          const std::vector<RemoteFile>& files);

// The cache file of one expert inside an install: experts/L005/E0017.bin
std::string expert_cache_relpath(int64_t layer, int64_t expert);

}  // namespace deltafin::setup
