// Views of an expert's bytes and the checks every store applies to them.
#include "experts/expert_store.h"

#include "base/error.h"
#include "kernels/matmul.h"

namespace deltafin::experts {
namespace {

WeightMatrix view_matrix(const ExpertMatrixLayout& m, const uint8_t* base) {
  WeightMatrix w;
  w.dtype = m.dtype;
  w.data = base + m.data_offset;
  w.scales = m.dtype == kernels::WeightDType::kMxfp4 ? base + m.scales_offset : nullptr;
  w.rows = m.rows;
  w.cols = m.cols;
  return w;
}

void check_scales(const WeightMatrix& w, int layer, int expert, const char* which) {
  if (w.dtype != kernels::WeightDType::kMxfp4) return;
  kernels::check_mxfp4_scales(w.scales, w.rows, w.cols / 32,
                              base::str_cat("layer ", layer, " expert ", expert, " ", which));
}

}  // namespace

ExpertLayout expert_layout(const format::ExpertSchema& schema,
                           const std::vector<uint64_t>& tensor_offsets, uint64_t span_bytes) {
  DF_ASSERT(tensor_offsets.size() == schema.tensors.size());
  ExpertLayout layout;
  for (const format::ExpertSchema::Matrix& m : schema.matrices) {
    ExpertMatrixLayout& out = m.role == format::Role::kExpertGate   ? layout.gate
                              : m.role == format::Role::kExpertDown ? layout.down
                                                                    : layout.up;
    out.dtype = schema.mxfp4 ? kernels::WeightDType::kMxfp4 : kernels::WeightDType::kBF16;
    out.data_offset = tensor_offsets[m.data];
    out.scales_offset = schema.mxfp4 ? tensor_offsets[m.scales] : 0;
    out.rows = m.rows;
    out.cols = m.cols;
  }
  layout.span_bytes = span_bytes;
  return layout;
}

ExpertWeights view_expert(const ExpertLayout& layout, const uint8_t* base) {
  return {view_matrix(layout.gate, base), view_matrix(layout.down, base),
          view_matrix(layout.up, base)};
}

void check_expert_scales(const ExpertWeights& weights, int layer, int expert) {
  check_scales(weights.gate, layer, expert, "w1");
  check_scales(weights.down, layer, expert, "w2");
  check_scales(weights.up, layer, expert, "w3");
}

}  // namespace deltafin::experts
