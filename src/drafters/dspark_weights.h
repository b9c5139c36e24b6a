// A DSpark drafter's own tensors (DIR/model.safetensors), every name, shape and dtype checked
// against the config. Its embed_tokens (a copy of the target's) is checked in the header but never
// mapped: the drafter borrows the target's embedding and lm_head.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drafters/dspark_config.h"
#include "format/checkpoint.h"
#include "kernels/weight_matrix.h"

namespace deltafin::drafters {

using kernels::WeightMatrix;

struct DSparkLayerWeights {
  std::vector<float> input_norm, post_norm;  // [hidden]
  WeightMatrix q_a;                          // [q_lora, hidden]
  std::vector<float> q_a_norm;               // [q_lora]
  WeightMatrix q_b;                          // [heads · (nope + rope), q_lora]
  WeightMatrix kv_a;                         // [kv_lora + rope, hidden]
  std::vector<float> kv_a_norm;              // [kv_lora]
  WeightMatrix kv_b;                         // [heads · (nope + v), kv_lora]
  WeightMatrix o_proj;                       // [hidden, heads · v]
  WeightMatrix gate, up;                     // [intermediate, hidden]
  WeightMatrix down;                         // [hidden, intermediate]
};

struct DSparkWeights {
  std::shared_ptr<const format::Checkpoint> checkpoint;  // the mapping every view points into
  WeightMatrix context_proj;                             // [hidden, n_taps · target_hidden]
  std::vector<float> context_norm;                       // [hidden]
  std::vector<DSparkLayerWeights> layers;
  std::vector<float> final_norm;    // [hidden]
  WeightMatrix markov_w1;           // [vocab, markov_rank]: an embedding table
  WeightMatrix markov_w2;           // [vocab, markov_rank]: Linear(markov_rank → vocab)
  std::vector<float> confidence_w;  // [hidden + markov_rank]
  float confidence_bias = 0;
  uint64_t owned_bytes = 0;  // every tensor but embed_tokens
};

// The tensors a DSpark checkpoint of this config holds, in no particular order.
struct DSparkTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<DSparkTensor> dspark_tensor_table(const DSparkConfig& c);
inline constexpr const char* kDSparkEmbedName = "embed_tokens.weight";

// Checks that `tensors` (read from `file`) are exactly the table: no tensor missing or extra,
// every one BF16 with the table's shape. Throws base::Error naming the file and tensor.
void check_dspark_tensors(const std::vector<format::TensorInfo>& tensors, const DSparkConfig& c,
                          const std::string& file);

// Opens DIR/model.safetensors, checks it, and views every tensor but the embedding.
DSparkWeights load_dspark_weights(const std::string& dir, const DSparkConfig& c);

}  // namespace deltafin::drafters
