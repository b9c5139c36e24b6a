// Model plan → cuda::GpuModelDesc: the mapped weights' host views, the shapes, the experts'
// spans mapped from the checkpoint.
#include "runtime/gpu_bind.h"

#if DELTAFIN_WITH_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>

#include "base/error.h"
#include "base/memory_budget.h"
#include "experts/expert_store.h"

namespace deltafin::runtime {
namespace {

cuda::HostMatrix host(const kernels::WeightMatrix& m, int64_t layer, const char* name) {
  cuda::HostMatrix h;
  if (m.empty()) return h;
  if (m.dtype == kernels::WeightDType::kBF16) {
    h.dtype = cuda::HostMatrix::DType::kBf16;
  } else if (m.dtype == kernels::WeightDType::kMxfp4) {
    h.dtype = cuda::HostMatrix::DType::kMxfp4;
    h.scales = m.scales;
  } else {
    base::fail("--device cuda: ",
               layer < 0 ? std::string("the model's ") : base::str_cat("layer ", layer, " "), name,
               " is ", kernels::weight_dtype_name(m.dtype),
               "; the CUDA backend takes BF16 and MXFP4 weights");
  }
  h.data = m.data;
  h.rows = m.rows;
  h.cols = m.cols;
  return h;
}

cuda::GpuGlu glu(const model::GluWeights& w, int64_t layer, const char* name) {
  return {host(w.gate, layer, name), host(w.up, layer, name), host(w.down, layer, name)};
}

void require(bool ok, const char* what) {
  if (!ok) base::fail("--device cuda: ", what, "; the CUDA backend runs Kimi K3 checkpoints");
}

}  // namespace

cuda::GpuModelDesc bind_gpu_model(const model::Model& m) {
  const model::ModelPlan& plan = m.plan();
  const format::ModelConfig& c = plan.config;
  require(c.arch == format::Arch::kKimiK3, "the model is not kimi_k3");
  require(!m.int8_spine(), "the int8 spine is on (--spine-dtype int8)");
  require(plan.traits.activation.kind == model::Activation::Kind::kSiTU,
          "the activation is not SiTU");
  require(plan.kda_shape.gate == model::KdaGate::kLowerBound, "the KDA gate is not lower-bounded");
  require(plan.mla_shape.q_lora_rank > 0, "MLA has no q low rank");
  cuda::GpuModelDesc desc;
  cuda::GpuShape& sh = desc.shape;
  sh.hidden = c.hidden_size;
  sh.vocab = c.vocab_size;
  sh.rms_eps = static_cast<float>(c.rms_norm_eps);
  sh.attn_res_block = plan.traits.attn_res_block_size;
  sh.kda_heads = plan.kda_shape.n_heads;
  sh.kda_dim = plan.kda_shape.head_dim;
  sh.conv_kernel = plan.kda_shape.conv_kernel;
  sh.kda_lower_bound = plan.kda_shape.gate_lower_bound;
  sh.kda_norm_eps = plan.kda_shape.norm_eps;
  sh.mla_heads = plan.mla_shape.n_heads;
  sh.q_lora = plan.mla_shape.q_lora_rank;
  sh.kv_rank = plan.mla_shape.kv_lora_rank;
  sh.nope = plan.mla_shape.nope_dim;
  sh.rope = plan.mla_shape.rope_dim;
  sh.v_dim = plan.mla_shape.v_dim;
  sh.mla_latent_eps = plan.mla_shape.latent_norm_eps;
  sh.moe_width = plan.moe_shape.width;
  const model::RouterConfig& r = plan.moe_shape.router;
  sh.router = {r.n_experts, r.top_k, r.n_groups, r.topk_groups, r.renormalize, r.scaling};
  sh.moe_norm_eps = plan.moe_shape.norm_eps;
  sh.situ_beta = plan.traits.activation.beta;
  sh.situ_linear_beta = plan.traits.activation.linear_beta;

  require(plan.embed.dtype == kernels::WeightDType::kBF16, "the embedding is not BF16");
  desc.embed = host(plan.embed, -1, "embed_tokens");
  desc.lm_head = host(plan.lm_head, -1, "lm_head");
  desc.final_norm = plan.final_norm.data();
  desc.output_res = sh.attn_res_block > 0 ? plan.output_res.key.data() : nullptr;
  const experts::ExpertCatalog& catalog = m.expert_catalog();
  for (int64_t l = 0; l < static_cast<int64_t>(plan.layers.size()); ++l) {
    const model::LayerPlan& lp = plan.layers[l];
    cuda::GpuLayer g;
    g.input_norm = lp.input_norm.data();
    g.post_norm = lp.post_norm.data();
    g.attn_res = sh.attn_res_block > 0 ? lp.attn_res.key.data() : nullptr;
    g.mlp_res = sh.attn_res_block > 0 ? lp.mlp_res.key.data() : nullptr;
    if (const model::KdaWeights* k = lp.kda()) {
      g.kda = true;
      if (k->g_proj.empty()) base::fail("--device cuda: layer ", l, " KDA has no full-rank g_proj");
      g.kda_w = {host(k->q_proj, l, "q_proj"),
                 host(k->k_proj, l, "k_proj"),
                 host(k->v_proj, l, "v_proj"),
                 k->q_conv.data(),
                 k->k_conv.data(),
                 k->v_conv.data(),
                 host(k->f_a, l, "f_a_proj"),
                 host(k->f_b, l, "f_b_proj"),
                 k->a_log.data(),
                 k->dt_bias.data(),
                 host(k->b_proj, l, "b_proj"),
                 host(k->g_proj, l, "g_proj"),
                 k->o_norm.data(),
                 host(k->o_proj, l, "o_proj")};
    } else if (const model::MlaWeights* a = lp.mla()) {
      g.kda = false;
      require(a->kv_b.dtype == kernels::WeightDType::kBF16, "an MLA kv_b_proj is not BF16");
      g.mla_w = {host(a->q_a, l, "q_a_proj"),  a->q_a_norm.data(),
                 host(a->q_b, l, "q_b_proj"),  host(a->kv_a, l, "kv_a_proj_with_mqa"),
                 a->kv_a_norm.data(),          host(a->kv_b, l, "kv_b_proj"),
                 host(a->g_proj, l, "g_proj"), host(a->o_proj, l, "o_proj")};
    } else {
      base::fail("--device cuda: layer ", l, " is GQA; the CUDA backend runs KDA and MLA layers");
    }
    if (const model::MoeWeights* moe = lp.moe()) {
      g.moe = true;
      cuda::GpuMoeLayer& gm = g.moe_w;
      gm.router = host(moe->router, l, "router");
      gm.score_bias = moe->score_bias.data();
      gm.latent_down = host(moe->latent_down, l, "routed_expert_down_proj");
      gm.latent_norm = moe->latent_norm.empty() ? nullptr : moe->latent_norm.data();
      gm.latent_up = host(moe->latent_up, l, "routed_expert_up_proj");
      if (!moe->shared.gate.empty()) gm.shared = glu(moe->shared, l, "shared_experts");
      const experts::ExpertCatalog::Layer& cl = catalog.layers[l];
      for (const format::ExpertSpan& span : cl.spans) {
        const format::TensorInfo whole{base::str_cat("layer ", l, " expert ", span.expert),
                                       format::DType::kU8,
                                       {static_cast<int64_t>(span.nbytes)},
                                       span.file,
                                       span.offset,
                                       span.nbytes};
        const experts::ExpertWeights ew =
            experts::view_expert(cl.layout, m.checkpoint().map(whole).data());
        gm.experts.push_back({host(ew.gate, l, "expert w1"), host(ew.up, l, "expert w3"),
                              host(ew.down, l, "expert w2")});
      }
    } else {
      g.moe = false;
      g.dense = glu(*lp.dense(), l, "mlp");
    }
    desc.layers.push_back(std::move(g));
  }
  return desc;
}

namespace {

class StoreSource : public cuda::ExpertSource {
 public:
  StoreSource(std::unique_ptr<experts::StreamingExpertStore> store, uint64_t span_bytes, bool pin)
      : store_(std::move(store)), span_bytes_(span_bytes), pinned_(pin) {
    if (!pin) return;
    const cudaError_t err =
        cudaHostRegister(store_->pool_data(), store_->pool_bytes(), cudaHostRegisterDefault);
    if (err != cudaSuccess) {
      cudaGetLastError();
      base::fail("--device cuda: pinning the RAM tier of experts (",
                 base::format_bytes(store_->pool_bytes()),
                 ", cudaHostRegister): ", cudaGetErrorString(err),
                 "; lower --memory-budget or --expert-slots");
    }
  }
  ~StoreSource() override {
    batch_.reset();
    if (pinned_) cudaHostUnregister(store_->pool_data());
  }
  void request(int64_t layer, const std::vector<int32_t>& experts) override {
    batch_.reset();  // the previous route's: every copy out of it finished (run_route)
    batch_ = store_->request(static_cast<int>(layer), experts);
    layer_ = layer;
  }
  cuda::HostExpert next() override {
    const experts::ReadyExpert r = batch_->acquire_next();
    return {r.index,
            {host(r.weights.gate, layer_, "expert w1"), host(r.weights.up, layer_, "expert w3"),
             host(r.weights.down, layer_, "expert w2")}};
  }
  void release(size_t index) override { batch_->release(index); }
  // Held experts keep their slots pinned; the rest of the pool keeps reads going.
  int max_held() const override { return std::max(1, std::min(8, store_->n_slots() - 1)); }
  cuda::ExpertSourceStats stats() const override {
    const experts::ExpertStoreStats e = store_->stats();
    cuda::ExpertSourceStats s;
    s.ram_hits = e.cache_hits;
    s.ram_hit_bytes = e.cache_hits * span_bytes_;
    s.disk_reads = e.demand_reads + e.prefetch_reads;
    s.disk_bytes = e.bytes_read;
    s.wait_seconds = e.wait_seconds;
    return s;
  }

 private:
  std::unique_ptr<experts::StreamingExpertStore> store_;
  uint64_t span_bytes_;
  bool pinned_;
  std::unique_ptr<experts::ExpertBatch> batch_;
  int64_t layer_ = 0;
};

}  // namespace

std::unique_ptr<cuda::ExpertSource> store_expert_source(
    std::unique_ptr<experts::StreamingExpertStore> store, uint64_t span_bytes, bool pin) {
  return std::make_unique<StoreSource>(std::move(store), span_bytes, pin);
}

std::unique_ptr<cuda::ExpertSource> streaming_expert_source(
    const model::Model& m, const experts::StreamingStoreOptions& options,
    std::shared_ptr<io::ReadScheduler> scheduler, const experts::StreamingExpertStore** store) {
  const experts::ExpertCatalog& catalog = m.expert_catalog();
  uint64_t span = 0;
  for (const experts::ExpertCatalog::Layer& l : catalog.layers)
    span = std::max(span, l.layout.span_bytes);
  auto owned =
      std::make_unique<experts::StreamingExpertStore>(catalog, std::move(scheduler), options);
  *store = owned.get();
  return store_expert_source(std::move(owned), span, true);
}

}  // namespace deltafin::runtime
#endif
