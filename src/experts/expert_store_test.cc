// Expert views from a layout, the mapped store's batches, and the MXFP4 scale check on first use.
#include <gtest/gtest.h>

#include <numeric>

#include "base/error.h"
#include "experts/mapped_expert_store.h"

namespace deltafin::experts {
namespace {

// Two layers; layer 1 has 3 MXFP4 experts of [32 x 64] / [64 x 32] / [32 x 64], back to back.
struct Bank {
  std::vector<uint8_t> bytes;
  ExpertCatalog catalog;
};

Bank make_bank() {
  Bank b;
  ExpertLayout lay;
  uint64_t off = 0;
  for (ExpertMatrixLayout* m : {&lay.gate, &lay.down, &lay.up}) {
    const bool down = m == &lay.down;
    *m = {kernels::WeightDType::kMxfp4, off, off + 32 * 64 / 2, down ? 64 : 32, down ? 32 : 64};
    off += 32 * 64 / 2 + 32 * 64 / 32;
  }
  lay.span_bytes = off;
  b.bytes.assign(3 * off, 0x21);
  for (int e = 0; e < 3; ++e)
    for (const ExpertMatrixLayout* m : {&lay.gate, &lay.down, &lay.up})
      std::fill_n(b.bytes.begin() + e * off + m->scales_offset, 32 * 64 / 32, 127);
  b.catalog.layers.resize(2);
  b.catalog.layers[1].layout = lay;
  for (int e = 0; e < 3; ++e) b.catalog.layers[1].spans.push_back({1, e, "mem", e * off, off});
  return b;
}

TEST(ExpertStore, ViewsFollowTheLayout) {
  Bank b = make_bank();
  const ExpertLayout& lay = b.catalog.layers[1].layout;
  const ExpertWeights w = view_expert(lay, b.bytes.data() + 2 * lay.span_bytes);
  EXPECT_EQ(w.gate.data, b.bytes.data() + 2 * lay.span_bytes);
  EXPECT_EQ(w.down.scales, b.bytes.data() + 2 * lay.span_bytes + lay.down.scales_offset);
  EXPECT_EQ(w.down.rows, 64);
  EXPECT_EQ(w.down.cols, 32);
  EXPECT_EQ(w.up.dtype, kernels::WeightDType::kMxfp4);
}

TEST(MappedExpertStore, BatchHandsOutEachRequestedExpertOnce) {
  Bank b = make_bank();
  uint8_t* base = b.bytes.data();
  MappedExpertStore store(b.catalog,
                          [base](const format::ExpertSpan& s) { return base + s.offset; });
  const std::vector<int32_t> ids = {2, 0};
  std::unique_ptr<ExpertBatch> batch = store.request(1, ids);
  ASSERT_EQ(batch->size(), 2u);
  std::vector<bool> seen(2, false);
  for (int i = 0; i < 2; ++i) {
    const ReadyExpert r = batch->acquire_next();
    ASSERT_LT(r.index, 2u);
    EXPECT_EQ(r.expert, ids[r.index]);
    EXPECT_EQ(r.weights.gate.data, base + ids[r.index] * b.catalog.layers[1].layout.span_bytes);
    EXPECT_FALSE(seen[r.index]);
    seen[r.index] = true;
    batch->release(r.index);
  }
}

TEST(MappedExpertStore, NanScaleIsReportedWithLayerAndExpert) {
  Bank b = make_bank();
  const ExpertCatalog::Layer& layer = b.catalog.layers[1];
  b.bytes[layer.spans[2].offset + layer.layout.up.scales_offset + 5] = 255;
  uint8_t* base = b.bytes.data();
  MappedExpertStore store(b.catalog,
                          [base](const format::ExpertSpan& s) { return base + s.offset; });
  EXPECT_NO_THROW(store.get(1, 1));
  try {
    store.get(1, 2);
    FAIL() << "scale byte 255 accepted";
  } catch (const base::Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 expert 2 w3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deltafin::experts
