// DSpark forward: context rows, the block's layers, and the heads. The block attends over the
// context rows and its own rows with no mask (bidirectional); attention runs in latent space
// (kv_b absorbed into the query and the output), equal to the expanded form up to rounding.
#include "drafters/dspark_forward.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "model/model.h"

namespace deltafin::drafters {

using kernels::matmul;

std::unique_ptr<DSparkModel> DSparkModel::load(const std::string& dir, const model::Model& target) {
  DSparkConfig c = load_dspark_config(dir);
  const format::ModelConfig& t = target.config();
  const std::string what = "DSpark drafter " + dir + ": ";
  if (c.target_hidden_size != t.hidden_size || c.hidden_size != t.hidden_size)
    base::fail(what, "hidden_size ", c.hidden_size, " / target_hidden_size ", c.target_hidden_size,
               " do not match the target's hidden_size ", t.hidden_size,
               " (it borrows the target's embedding and lm_head)");
  if (c.vocab_size != t.vocab_size)
    base::fail(what, "vocab_size ", c.vocab_size, " differs from the target's ", t.vocab_size);
  if (c.target_num_hidden_layers != t.num_hidden_layers)
    base::fail(what, "target_num_hidden_layers ", c.target_num_hidden_layers,
               " differs from the target's num_hidden_layers ", t.num_hidden_layers);
  DSparkWeights w = load_dspark_weights(dir, c);
  return std::make_unique<DSparkModel>(std::move(c), std::move(w), target.plan().embed,
                                       target.plan().lm_head);
}

DSparkModel::DSparkModel(DSparkConfig config, DSparkWeights weights, WeightMatrix embed,
                         WeightMatrix lm_head)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      embed_(embed),
      lm_head_(lm_head),
      yarn_(yarn_table(config_)),
      scale_(static_cast<float>(softmax_scale(config_))) {
  DF_ASSERT(embed_.rows == config_.vocab_size && embed_.cols == config_.hidden_size);
  DF_ASSERT(lm_head_.rows == config_.vocab_size && lm_head_.cols == config_.hidden_size);
}

void DSparkModel::rope(float* x, int64_t position) const {
  // Angles and their cos/sin in fp64, rounded once: the table is a property of the position.
  for (size_t i = 0; i < yarn_.inv_freq.size(); ++i) {
    const double a = static_cast<double>(position) * yarn_.inv_freq[i];
    const float c = static_cast<float>(std::cos(a) * yarn_.cos_sin_scale);
    const float s = static_cast<float>(std::sin(a) * yarn_.cos_sin_scale);
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x1 * c + x0 * s;
  }
}

void DSparkModel::append_context(DSparkContext& ctx, const float* taps, int64_t pass_rows,
                                 int64_t keep_rows, int64_t first_position, float* features) const {
  const DSparkConfig& c = config_;
  if (first_position != ctx.length())
    base::fail("DSpark context: rows for position ", first_position, " appended to a cache of ",
               ctx.length(), " positions");
  if (keep_rows < 0 || keep_rows > pass_rows)
    base::fail("DSpark context: keep ", keep_rows, " of ", pass_rows, " tapped rows");
  if (keep_rows == 0) return;
  const int64_t th = c.target_hidden_size, width = c.context_width(), d = c.hidden_size;
  const int64_t rank = c.kv_lora_rank, ckv_w = rank + c.rope_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  // c_p = concat over taps (tap-major in the pass buffer, position-major here).
  std::vector<float> cp(static_cast<size_t>(keep_rows * width));
  for (int64_t r = 0; r < keep_rows; ++r)
    for (int64_t j = 0; j < c.n_taps(); ++j)
      std::copy_n(taps + (j * pass_rows + r) * th, th, cp.data() + r * width + j * th);
  std::vector<float> u(static_cast<size_t>(keep_rows * d));
  matmul(weights_.context_proj, cp.data(), keep_rows, u.data());
  kernels::rmsnorm_rows(u.data(), weights_.context_norm.data(), keep_rows, d, eps, u.data());
  if (features) std::copy(u.begin(), u.end(), features);
  const int64_t first = ctx.extend(keep_rows);
  std::vector<float> ckv(static_cast<size_t>(keep_rows * ckv_w));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DSparkLayerWeights& w = weights_.layers[l];
    // No input_layernorm: context_norm has already normalized u_p (spec §1.2, context path).
    matmul(w.kv_a, u.data(), keep_rows, ckv.data());
    for (int64_t r = 0; r < keep_rows; ++r) {
      kernels::rmsnorm(ckv.data() + r * ckv_w, w.kv_a_norm.data(), rank, eps,
                       ctx.mutable_latent(l, first + r));
      float* kpe = ctx.mutable_k_pe(l, first + r);
      std::copy_n(ckv.data() + r * ckv_w + rank, c.rope_dim, kpe);
      rope(kpe, first + r);
    }
  }
  ctx.commit(keep_rows);
}

void DSparkModel::attend(const DSparkLayerWeights& w, const DSparkContext& ctx, int64_t layer,
                         const float* q, const float* lat, const float* kpe, float* out) const {
  const DSparkConfig& c = config_;
  const int64_t nh = c.num_heads, rank = c.kv_lora_rank, nope = c.nope_dim, rd = c.rope_dim;
  const int64_t qk = c.qk_dim(), kvw = nope + c.v_dim, L = ctx.length();
  const int64_t total = L + kDSparkBlockRows;
  const float* ctx_lat = ctx.latent(layer);
  const float* ctx_kpe = ctx.k_pe(layer);
  base::default_pool().parallel_for(nh, 1, [&](size_t hb, size_t he) {
    std::vector<float> wuk(static_cast<size_t>(nope * rank)), qhat(rank), p(total);
    std::vector<float> obar(static_cast<size_t>(kDSparkBlockRows * rank));
    std::vector<float> oh(static_cast<size_t>(kDSparkBlockRows * c.v_dim));
    for (int64_t h = static_cast<int64_t>(hb); h < static_cast<int64_t>(he); ++h) {
      for (int64_t i = 0; i < nope; ++i) kernels::decode_row(w.kv_b, h * kvw + i, &wuk[i * rank]);
      for (int64_t r = 0; r < kDSparkBlockRows; ++r) {
        const float* qh = q + (r * nh + h) * qk;
        std::fill(qhat.begin(), qhat.end(), 0.0f);
        for (int64_t i = 0; i < nope; ++i)
          for (int64_t k = 0; k < rank; ++k) qhat[k] += qh[i] * wuk[i * rank + k];
        // Every context row, then every block row: no mask anywhere (spec §1.2).
        for (int64_t s = 0; s < total; ++s) {
          const float* ls = s < L ? ctx_lat + s * rank : lat + (s - L) * rank;
          const float* ks = s < L ? ctx_kpe + s * rd : kpe + (s - L) * rd;
          p[s] = (kernels::dot(qhat.data(), ls, rank) + kernels::dot(qh + nope, ks, rd)) * scale_;
        }
        kernels::softmax(p.data(), total);
        float* ob = &obar[r * rank];
        std::fill(ob, ob + rank, 0.0f);
        for (int64_t s = 0; s < total; ++s) {
          const float* ls = s < L ? ctx_lat + s * rank : lat + (s - L) * rank;
          for (int64_t k = 0; k < rank; ++k) ob[k] += p[s] * ls[k];
        }
      }
      const WeightMatrix wuv = kernels::row_block(w.kv_b, h * kvw + nope, c.v_dim);
      kernels::matmul_rows(wuv, obar.data(), kDSparkBlockRows, oh.data(), 0, c.v_dim);
      for (int64_t r = 0; r < kDSparkBlockRows; ++r)
        std::copy_n(&oh[r * c.v_dim], c.v_dim, out + (r * nh + h) * c.v_dim);
    }
  });
}

DSparkProposal DSparkModel::propose(const DSparkContext& ctx, int32_t anchor, int width,
                                    bool want_logits) const {
  const DSparkConfig& c = config_;
  if (width < 1 || width > kDSparkBlockRows)
    base::fail("DSpark: width ", width, " outside [1, ", kDSparkBlockRows, "]");
  if (anchor < 0 || anchor >= c.vocab_size)
    base::fail("DSpark: anchor id ", anchor, " is outside the vocabulary [0, ", c.vocab_size, ")");
  DF_ASSERT(ctx.n_layers() == c.num_layers);
  if (ctx.length() + kDSparkBlockRows > c.max_position_embeddings)
    base::fail("DSpark: the block at positions ", ctx.length(), "..",
               ctx.length() + kDSparkBlockRows - 1, " passes max_position_embeddings ",
               c.max_position_embeddings);
  constexpr int64_t n = kDSparkBlockRows;
  const int64_t d = c.hidden_size, nh = c.num_heads, qk = c.qk_dim(), rank = c.kv_lora_rank;
  const int64_t ckv_w = rank + c.rope_dim, L = ctx.length();
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<float> h(n * d), x(n * d), y(n * d);
  for (int64_t r = 0; r < n; ++r)
    kernels::decode_row(embed_, r == 0 ? anchor : c.mask_token_id, &h[r * d]);
  std::vector<float> qa(n * c.q_lora_rank), q(n * nh * qk), ckv(n * ckv_w);
  std::vector<float> lat(n * rank), kpe(n * c.rope_dim), o(n * nh * c.v_dim);
  std::vector<float> g(n * c.intermediate_size), u(n * c.intermediate_size);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DSparkLayerWeights& w = weights_.layers[l];
    kernels::rmsnorm_rows(h.data(), w.input_norm.data(), n, d, eps, x.data());
    matmul(w.q_a, x.data(), n, qa.data());
    kernels::rmsnorm_rows(qa.data(), w.q_a_norm.data(), n, c.q_lora_rank, eps, qa.data());
    matmul(w.q_b, qa.data(), n, q.data());
    matmul(w.kv_a, x.data(), n, ckv.data());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t hd = 0; hd < nh; ++hd) rope(&q[(r * nh + hd) * qk + c.nope_dim], L + r);
      kernels::rmsnorm(&ckv[r * ckv_w], w.kv_a_norm.data(), rank, eps, &lat[r * rank]);
      std::copy_n(&ckv[r * ckv_w + rank], c.rope_dim, &kpe[r * c.rope_dim]);
      rope(&kpe[r * c.rope_dim], L + r);
    }
    attend(w, ctx, l, q.data(), lat.data(), kpe.data(), o.data());
    matmul(w.o_proj, o.data(), n, y.data());
    kernels::add(y.data(), n * d, h.data());
    kernels::rmsnorm_rows(h.data(), w.post_norm.data(), n, d, eps, x.data());
    matmul(w.gate, x.data(), n, g.data());
    matmul(w.up, x.data(), n, u.data());
    kernels::silu_glu(g.data(), u.data(), n * c.intermediate_size, g.data());
    matmul(w.down, g.data(), n, y.data());
    kernels::add(y.data(), n * d, h.data());
  }
  kernels::rmsnorm_rows(h.data(), weights_.final_norm.data(), n, d, eps, x.data());
  // Only the rows that will be verified go through the lm_head (its cost is the vocab).
  const int64_t vocab = c.vocab_size;
  std::vector<float> logits(static_cast<size_t>(width * vocab));
  matmul(lm_head_, x.data(), width, logits.data());
  DSparkProposal p;
  std::vector<float> e(c.markov_rank), bias(vocab);
  if (want_logits) {
    p.hidden.assign(x.begin(), x.end());
    p.logits = logits;
  }
  int32_t prev = anchor;
  for (int64_t r = 0; r < width; ++r) {
    kernels::decode_row(weights_.markov_w1, prev, e.data());
    matmul(weights_.markov_w2, e.data(), 1, bias.data());
    float* row = &logits[r * vocab];
    kernels::add(bias.data(), vocab, row);
    const int32_t tok = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    const float conf = kernels::dot(weights_.confidence_w.data(), &x[r * d], d) +
                       kernels::dot(weights_.confidence_w.data() + d, e.data(), c.markov_rank) +
                       weights_.confidence_bias;
    p.prev_ids.push_back(prev);
    p.ids.push_back(tok);
    p.confidence_logit.push_back(conf);
    p.confidence.push_back(kernels::sigmoid(conf));
    prev = tok;
  }
  if (want_logits) p.logits_markov = std::move(logits);
  return p;
}

}  // namespace deltafin::drafters
