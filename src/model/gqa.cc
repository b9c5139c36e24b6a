// GQA forward: projections for all rows, per-head norms and RoPE, append to the cache, then each
// (row, query head) attends in parallel (scores, softmax, value mix: a fixed order per row),
// o_proj.
#include "model/gqa.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/rope.h"

namespace deltafin::model {

void GqaCache::reset(const GqaShape& shape, int64_t max) {
  k.clear();
  v.clear();
  n_positions = 0;
  max_positions = max;
  k.reserve(max * shape.kv_width());
  v.reserve(max * shape.kv_width());
}

void GqaCache::extend(const GqaShape& shape, int64_t n) {
  const int64_t need = n_positions + n;
  if (static_cast<int64_t>(k.capacity()) < need * shape.kv_width()) {
    // Beyond the reservation (none planned, or a copy): room for the plan, or twice the need.
    const int64_t room = std::max(max_positions, 2 * need);
    k.reserve(room * shape.kv_width());
    v.reserve(room * shape.kv_width());
  }
  k.resize(need * shape.kv_width());
  v.resize(need * shape.kv_width());
}

void GqaCache::truncate(const GqaShape& shape, int64_t n) {
  DF_ASSERT(n >= 0 && n <= n_positions);
  k.resize(n * shape.kv_width());
  v.resize(n * shape.kv_width());
  n_positions = n;
}

uint64_t gqa_cache_bytes_per_position(const GqaShape& shape) {
  return 2 * static_cast<uint64_t>(shape.kv_width()) * sizeof(float);
}

void gqa_forward(const GqaShape& sh, const GqaWeights& w, const float* x, int64_t n,
                 GqaCache& cache, GqaWorkspace& ws, float* out) {
  DF_ASSERT(sh.n_heads % sh.n_kv_heads == 0);
  const int64_t nh = sh.n_heads, nkv = sh.n_kv_heads, hd = sh.head_dim, kvw = sh.kv_width();
  const int64_t first = cache.n_positions;
  float* q = ws.q.get(n * nh * hd);
  kernels::matmul(w.q_proj, x, n, q);
  kernels::rmsnorm_rows(q, w.q_norm.data(), n * nh, hd, sh.norm_eps, q);
  kernels::rope_neox_rows(q, n, nh, hd, first, sh.rope_theta);

  cache.extend(sh, n);
  float* k_new = cache.k.data() + first * kvw;
  kernels::matmul(w.k_proj, x, n, k_new);
  kernels::rmsnorm_rows(k_new, w.k_norm.data(), n * nkv, hd, sh.norm_eps, k_new);
  kernels::rope_neox_rows(k_new, n, nkv, hd, first, sh.rope_theta);
  kernels::matmul(w.v_proj, x, n, cache.v.data() + first * kvw);
  cache.n_positions = first + n;

  const int64_t group = nh / nkv, total = cache.n_positions;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* o = ws.o.get(n * nh * hd);
  const float* keys = cache.k.data();
  const float* values = cache.v.data();
  // Each (row, head) task writes only its own output, so the split over threads never changes a
  // bit; a thread's scores live in its own buffer (one cache length, not one per task).
  base::default_pool().parallel_for(n * nh, 1, [&](size_t b, size_t e) {
    std::vector<float> scores(static_cast<size_t>(total));
    for (int64_t t = static_cast<int64_t>(b); t < static_cast<int64_t>(e); ++t) {
      const int64_t r = t / nh, h = t % nh, kvh = h / group, len = first + r + 1;
      const float* qh = q + t * hd;
      float* p = scores.data();
      for (int64_t s = 0; s < len; ++s)
        p[s] = kernels::dot(qh, keys + s * kvw + kvh * hd, hd) * scale;
      kernels::softmax(p, len);
      float* oh = o + t * hd;
      std::fill(oh, oh + hd, 0.0f);
      for (int64_t s = 0; s < len; ++s) {
        const float* vs = values + s * kvw + kvh * hd;
        const float ps = p[s];
        for (int64_t c = 0; c < hd; ++c) oh[c] += ps * vs[c];
      }
    }
  });
  kernels::matmul(w.o_proj, o, n, out);
}

}  // namespace deltafin::model
