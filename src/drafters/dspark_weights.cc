// DSpark checkpoint binding: the tensor table from the config, the exact check, and the views.
#include "drafters/dspark_weights.h"

#include <map>

#include "base/error.h"
#include "kernels/matmul.h"

namespace deltafin::drafters {

std::vector<DSparkTensor> dspark_tensor_table(const DSparkConfig& c) {
  const int64_t d = c.hidden_size, h = c.num_heads;
  std::vector<DSparkTensor> t = {
      {kDSparkEmbedName, {c.vocab_size, d}},
      {"context_proj.weight", {d, c.context_width()}},
      {"context_norm.weight", {d}},
      {"final_norm.weight", {d}},
      {"markov_head.markov_w1.weight", {c.vocab_size, c.markov_rank}},
      {"markov_head.markov_w2.weight", {c.vocab_size, c.markov_rank}},
      {"confidence_head.proj.weight", {1, d + c.markov_rank}},
      {"confidence_head.proj.bias", {1}},
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {d}});
    t.push_back({p + "post_attention_layernorm.weight", {d}});
    t.push_back({p + "self_attn.q_a_proj.weight", {c.q_lora_rank, d}});
    t.push_back({p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}});
    t.push_back({p + "self_attn.q_b_proj.weight", {h * c.qk_dim(), c.q_lora_rank}});
    t.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.rope_dim, d}});
    t.push_back({p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}});
    t.push_back({p + "self_attn.kv_b_proj.weight", {h * (c.nope_dim + c.v_dim), c.kv_lora_rank}});
    t.push_back({p + "self_attn.o_proj.weight", {d, h * c.v_dim}});
    t.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, d}});
    t.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, d}});
    t.push_back({p + "mlp.down_proj.weight", {d, c.intermediate_size}});
  }
  return t;
}

void check_dspark_tensors(const std::vector<format::TensorInfo>& tensors, const DSparkConfig& c,
                          const std::string& file) {
  std::map<std::string, const format::TensorInfo*> found;
  for (const format::TensorInfo& t : tensors) found[t.name] = &t;
  const std::vector<DSparkTensor> table = dspark_tensor_table(c);
  std::map<std::string, bool> expected;
  for (const DSparkTensor& want : table) {
    expected[want.name] = true;
    const auto it = found.find(want.name);
    if (it == found.end())
      base::fail("file ", file, ": missing tensor ", want.name, " ",
                 format::shape_to_string(want.shape));
    const format::TensorInfo& got = *it->second;
    if (got.dtype != format::DType::kBF16)
      base::fail("file ", file, ": tensor ", want.name, " is ", format::dtype_name(got.dtype),
                 ", expected BF16");
    if (got.shape != want.shape)
      base::fail("file ", file, ": tensor ", want.name, " has shape ",
                 format::shape_to_string(got.shape), ", expected ",
                 format::shape_to_string(want.shape));
  }
  for (const format::TensorInfo& t : tensors)
    if (!expected.count(t.name))
      base::fail("file ", file, ": unexpected tensor ", t.name, " (not in a k3_dspark checkpoint)");
}

namespace {

class Binder {
 public:
  explicit Binder(const format::Checkpoint& ck) : ck_(ck) {}
  WeightMatrix matrix(const std::string& name) {
    const format::TensorInfo& t = ck_.get(name);
    owned_ += t.nbytes;
    return WeightMatrix{kernels::WeightDType::kBF16, ck_.map(t).data(), nullptr, t.shape[0],
                        t.shape.size() > 1 ? t.shape[1] : 1};
  }
  std::vector<float> vector(const std::string& name) {
    const WeightMatrix m = matrix(name);
    std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
    kernels::dequant_bf16(reinterpret_cast<const uint16_t*>(m.data), m.rows * m.cols, out.data());
    return out;
  }
  uint64_t owned() const { return owned_; }

 private:
  const format::Checkpoint& ck_;
  uint64_t owned_ = 0;
};

}  // namespace

DSparkWeights load_dspark_weights(const std::string& dir, const DSparkConfig& c) {
  DSparkWeights w;
  auto ck = std::make_shared<format::Checkpoint>(format::Checkpoint::open(dir));
  check_dspark_tensors(ck->tensors(), c, dir + "/" + format::kSingleFileName);
  w.checkpoint = ck;
  Binder b(*ck);
  w.context_proj = b.matrix("context_proj.weight");
  w.context_norm = b.vector("context_norm.weight");
  w.final_norm = b.vector("final_norm.weight");
  w.markov_w1 = b.matrix("markov_head.markov_w1.weight");
  w.markov_w2 = b.matrix("markov_head.markov_w2.weight");
  w.confidence_w = b.vector("confidence_head.proj.weight");
  w.confidence_bias = b.vector("confidence_head.proj.bias")[0];
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    DSparkLayerWeights lw;
    lw.input_norm = b.vector(p + "input_layernorm.weight");
    lw.post_norm = b.vector(p + "post_attention_layernorm.weight");
    lw.q_a = b.matrix(p + "self_attn.q_a_proj.weight");
    lw.q_a_norm = b.vector(p + "self_attn.q_a_layernorm.weight");
    lw.q_b = b.matrix(p + "self_attn.q_b_proj.weight");
    lw.kv_a = b.matrix(p + "self_attn.kv_a_proj_with_mqa.weight");
    lw.kv_a_norm = b.vector(p + "self_attn.kv_a_layernorm.weight");
    lw.kv_b = b.matrix(p + "self_attn.kv_b_proj.weight");
    lw.o_proj = b.matrix(p + "self_attn.o_proj.weight");
    lw.gate = b.matrix(p + "mlp.gate_proj.weight");
    lw.up = b.matrix(p + "mlp.up_proj.weight");
    lw.down = b.matrix(p + "mlp.down_proj.weight");
    w.layers.push_back(std::move(lw));
  }
  w.owned_bytes = b.owned();
  return w;
}

}  // namespace deltafin::drafters
