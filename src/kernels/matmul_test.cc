// Tests for matmul: every ISA variant against the scalar reference and a float64 dot product, on
// odd shapes (int8 as well), unaligned pointers and batches 1..17; batch, row-range and
// thread-count bit-identity (memcmp against n = 1 across column and row tiles); exact scale
// decoding at the E8M0 extremes; NaN scales reported with the tensor's name.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/matmul_variant.h"
#include "quant/bf16.h"
#include "quant/e2m1.h"
#include "quant/int8.h"
#include "quant/mxfp4.h"

namespace deltafin::kernels {
namespace {

using base::Isa;
using detail::MatmulVariant;

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kRef, Isa::kAvx2, Isa::kAvx512})
    if (base::isa_supported(isa)) out.push_back(isa);
  return out;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Owns the bytes of a random MXFP4 matrix, placed at an odd offset so that no row is aligned.
struct RandomMxfp4 {
  std::vector<uint8_t> packed, scales;
  Mxfp4Matrix m;
  RandomMxfp4(int64_t rows, int64_t cols, std::mt19937& rng, int scale_lo = 118, int scale_hi = 132)
      : packed(rows * cols / 2 + 1), scales(rows * cols / 32 + 1) {
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    std::uniform_int_distribution<int> s(scale_lo, scale_hi);
    for (auto& b : scales) b = static_cast<uint8_t>(s(rng));
    m = {packed.data() + 1, scales.data() + 1, rows, cols};
  }
};

struct RandomBf16 {
  std::vector<uint16_t> data;
  Bf16Matrix m;
  RandomBf16(int64_t rows, int64_t cols, std::mt19937& rng) : data(rows * cols + 1) {
    std::normal_distribution<float> d(0.0f, 0.05f);
    for (auto& v : data) v = quant::f32_to_bf16(d(rng));
    m = {data.data() + 1, rows, cols};
  }
};

// A random matrix quantized per row by quant/int8.h, at an odd offset (scales unaligned too).
struct RandomInt8 {
  std::vector<int8_t> q;
  std::vector<uint8_t> scales;
  Int8Matrix m;
  RandomInt8(int64_t rows, int64_t cols, std::mt19937& rng)
      : q(rows * cols + 1), scales(rows * 4 + 1) {
    std::normal_distribution<float> d(0.0f, 0.05f);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : row) v = d(rng);
      const float scale = quant::quantize_row_int8(row.data(), cols, q.data() + 1 + r * cols);
      std::memcpy(scales.data() + 1 + 4 * r, &scale, 4);
    }
    m = {q.data() + 1, scales.data() + 1, rows, cols};
  }
};

// Activations [n, cols] starting one float past an aligned boundary.
struct RandomX {
  std::vector<float> storage;
  const float* x;
  RandomX(int64_t n, int64_t cols, std::mt19937& rng) : storage(n * cols + 1) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : storage) v = d(rng);
    x = storage.data() + 1;
  }
};

std::vector<float> dense(const Mxfp4Matrix& w) {
  std::vector<float> out(w.rows * w.cols);
  dequant_mxfp4(w, 0, w.rows, out.data());
  return out;
}
std::vector<float> dense(const Bf16Matrix& w) {
  std::vector<float> out(w.rows * w.cols);
  dequant_bf16(w.data, w.rows * w.cols, out.data());
  return out;
}
std::vector<float> dense(const F32Matrix& w) { return {w.data, w.data + w.rows * w.cols}; }
std::vector<float> dense(const Int8Matrix& w) {
  std::vector<float> out(w.rows * w.cols);
  dequant_int8(w, 0, w.rows, out.data());
  return out;
}

// |y - y64| <= 1e-5 * Σ|w·x| per output, against a float64 dot of the exactly decoded weights.
template <typename Matrix>
void expect_close_to_f64(const Matrix& w, const float* x, int64_t n, const std::vector<float>& y,
                         const std::string& label) {
  const std::vector<float> wd = dense(w);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < w.rows; ++r) {
      double dot = 0.0, mag = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double p = static_cast<double>(wd[r * w.cols + c]) * x[i * w.cols + c];
        dot += p;
        mag += std::fabs(p);
      }
      ASSERT_LE(std::fabs(y[i * w.rows + r] - dot), 1e-5 * mag + 1e-30)
          << label << " row " << r << " act " << i << " got " << y[i * w.rows + r] << " want "
          << dot;
    }
}

template <typename Matrix>
void check_variant(const MatmulVariant& v, const std::string& isa, const Matrix& w, const float* x,
                   int64_t n) {
  const std::string label =
      isa + " " + std::to_string(w.rows) + "x" + std::to_string(w.cols) + " n=" + std::to_string(n);
  base::ThreadPool pool1(1), pool3(3);
  std::vector<float> y(n * w.rows, -1.0f), y3(n * w.rows, -2.0f);
  detail::matmul(v, pool1, w, x, n, y.data());
  detail::matmul(v, pool3, w, x, n, y3.data());
  expect_close_to_f64(w, x, n, y, label);
  // The thread count must not change a single bit.
  for (size_t k = 0; k < y.size(); ++k) ASSERT_EQ(bits(y[k]), bits(y3[k])) << label << " at " << k;
  // Every activation row equals its own n = 1 call, bit for bit.
  std::vector<float> y1(w.rows);
  for (int64_t i = 0; i < n; ++i) {
    detail::matmul(v, pool1, w, x + i * w.cols, 1, y1.data());
    for (int64_t r = 0; r < w.rows; ++r)
      ASSERT_EQ(bits(y1[r]), bits(y[i * w.rows + r])) << label << " act " << i << " row " << r;
  }
  // A row range writes exactly those outputs, with the same bits.
  if (w.rows >= 3) {
    std::vector<float> yr(n * w.rows, 7.0f);
    detail::matmul_rows(v, w, x, n, yr.data(), 1, w.rows - 1);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < w.rows; ++r) {
        const float want = (r == 0 || r == w.rows - 1) ? 7.0f : y[i * w.rows + r];
        ASSERT_EQ(bits(yr[i * w.rows + r]), bits(want)) << label << " range row " << r;
      }
  }
}

TEST(Matmul, Mxfp4EveryVariantOddShapes) {
  std::mt19937 rng(1);
  for (Isa isa : supported_isas()) {
    const MatmulVariant& v = detail::matmul_variant(isa);
    for (int64_t cols : {32, 96, 160, 224, 416, 1056}) {
      for (int64_t rows : {1, 3, 17}) {
        RandomMxfp4 w(rows, cols, rng);
        for (int64_t n : {1, 2, 3, 5, 16, 17}) {
          RandomX x(n, cols, rng);
          check_variant(v, base::isa_name(isa), w.m, x.x, n);
        }
      }
    }
  }
}

TEST(Matmul, Mxfp4AllBatchSizes) {
  std::mt19937 rng(2);
  RandomMxfp4 w(37, 224, rng);
  for (Isa isa : supported_isas())
    for (int64_t n = 1; n <= 17; ++n) {
      RandomX x(n, 224, rng);
      check_variant(detail::matmul_variant(isa), base::isa_name(isa), w.m, x.x, n);
    }
}

TEST(Matmul, Bf16AllBatchSizes) {
  std::mt19937 rng(12);
  RandomBf16 w(37, 545, rng);  // 17 chunks of 32 plus a tail of 1
  for (Isa isa : supported_isas())
    for (int64_t n = 1; n <= 17; ++n) {
      RandomX x(n, 545, rng);
      check_variant(detail::matmul_variant(isa), base::isa_name(isa), w.m, x.x, n);
    }
}

TEST(Matmul, Bf16EveryVariantOddShapes) {
  std::mt19937 rng(3);
  for (Isa isa : supported_isas()) {
    const MatmulVariant& v = detail::matmul_variant(isa);
    for (int64_t cols : {1, 7, 15, 16, 17, 31, 33, 63, 100, 513}) {
      for (int64_t rows : {1, 5, 19}) {
        RandomBf16 w(rows, cols, rng);
        for (int64_t n : {1, 2, 4, 16, 17}) {
          RandomX x(n, cols, rng);
          check_variant(v, base::isa_name(isa), w.m, x.x, n);
        }
      }
    }
  }
}

TEST(Matmul, Int8EveryVariantOddShapes) {
  std::mt19937 rng(21);
  for (Isa isa : supported_isas()) {
    const MatmulVariant& v = detail::matmul_variant(isa);
    for (int64_t cols : {1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 513}) {
      for (int64_t rows : {1, 5, 19}) {
        RandomInt8 w(rows, cols, rng);
        for (int64_t n : {1, 2, 4, 16, 17}) {
          RandomX x(n, cols, rng);
          check_variant(v, base::isa_name(isa), w.m, x.x, n);
        }
      }
    }
  }
}

TEST(Matmul, Int8AllBatchSizes) {
  std::mt19937 rng(22);
  RandomInt8 w(37, 545, rng);
  for (Isa isa : supported_isas())
    for (int64_t n = 1; n <= 17; ++n) {
      RandomX x(n, 545, rng);
      check_variant(detail::matmul_variant(isa), base::isa_name(isa), w.m, x.x, n);
    }
}

// Every variant against the reference (fp64 sums, one rounding) on one shape, and a zero row (scale
// 0) gives exactly 0.
TEST(Matmul, Int8VariantsMatchReferenceAndZeroRows) {
  std::mt19937 rng(23);
  RandomInt8 w(9, 300, rng);
  std::fill(w.q.begin() + 1 + 4 * 300, w.q.begin() + 1 + 5 * 300, int8_t{0});
  const float zero = 0.0f;
  std::memcpy(w.scales.data() + 1 + 4 * 4, &zero, 4);
  RandomX x(3, 300, rng);
  base::ThreadPool pool(1);
  std::vector<float> want(3 * 9);
  detail::matmul(detail::matmul_variant(Isa::kRef), pool, w.m, x.x, 3, want.data());
  for (Isa isa : supported_isas()) {
    std::vector<float> got(3 * 9);
    detail::matmul(detail::matmul_variant(isa), pool, w.m, x.x, 3, got.data());
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i * 9 + 4], 0.0f) << base::isa_name(isa);
      for (int64_t r = 0; r < 9; ++r)
        EXPECT_NEAR(got[i * 9 + r], want[i * 9 + r], 1e-5 * (std::fabs(want[i * 9 + r]) + 1.0))
            << base::isa_name(isa) << " act " << i << " row " << r;
    }
  }
}

TEST(Matmul, F32EveryVariantOddShapes) {
  std::mt19937 rng(4);
  for (Isa isa : supported_isas()) {
    const MatmulVariant& v = detail::matmul_variant(isa);
    for (int64_t cols : {1, 7, 8, 9, 16, 17, 100}) {
      for (int64_t rows : {1, 6, 13}) {
        RandomX wdata(rows, cols, rng);  // any floats will do as weights
        const F32Matrix w{wdata.x, rows, cols};
        for (int64_t n : {1, 3, 17}) {
          RandomX x(n, cols, rng);
          check_variant(v, base::isa_name(isa), w, x.x, n);
        }
      }
    }
  }
}

// Rows of a batch against their own n = 1 calls, memcmp, for every n of a verify pass (1..16) on
// shapes with many column tiles and a partial last step (2080 = 16 MXFP4 groups + 1 block, 2100 =
// 65 BF16 chunks + 20) and more weight rows than one row tile, computed in row ranges that cut the
// row tiles anywhere (as a thread split does).
template <typename Matrix>
void expect_batch_rows_equal_single(const MatmulVariant& v, const std::string& isa, const Matrix& w,
                                    std::mt19937& rng) {
  const RandomX x(kMatmulMaxBatch, w.cols, rng);
  std::vector<float> y1(kMatmulMaxBatch * w.rows);
  for (int64_t i = 0; i < kMatmulMaxBatch; ++i)
    detail::matmul_rows(v, w, x.x + i * w.cols, 1, y1.data() + i * w.rows, 0, w.rows);
  const int64_t cuts[] = {0, 5, 21, 22, w.rows};
  for (int64_t n = 1; n <= kMatmulMaxBatch; ++n) {
    std::vector<float> y(n * w.rows, -3.0f);
    for (size_t c = 0; c + 1 < std::size(cuts); ++c)
      detail::matmul_rows(v, w, x.x, n, y.data(), cuts[c], cuts[c + 1]);
    ASSERT_EQ(std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)), 0)
        << isa << " " << w.rows << "x" << w.cols << " n=" << n;
  }
}

TEST(Matmul, BatchRowsEqualSingleRowAcrossTiles) {
  std::mt19937 rng(21);
  const RandomMxfp4 w(41, 2080, rng);
  const RandomBf16 wb(41, 2100, rng);
  for (Isa isa : supported_isas()) {
    expect_batch_rows_equal_single(detail::matmul_variant(isa), base::isa_name(isa), w.m, rng);
    expect_batch_rows_equal_single(detail::matmul_variant(isa), base::isa_name(isa), wb.m, rng);
  }
}

TEST(Matmul, LargeBatchTilesReuseWeights) {
  // Enough rows that a batch above 16 runs in several row tiles; 40 activations make 3 tiles.
  std::mt19937 rng(5);
  RandomMxfp4 w(700, 1024, rng);
  RandomBf16 wb(150, 1000, rng);
  RandomX x(40, 1024, rng), xb(40, 1000, rng);
  for (Isa isa : supported_isas()) {
    check_variant(detail::matmul_variant(isa), base::isa_name(isa), w.m, x.x, 40);
    check_variant(detail::matmul_variant(isa), base::isa_name(isa), wb.m, xb.x, 40);
  }
}

TEST(Matmul, Mxfp4ExtremeScalesAreExact) {
  // One row per scale byte; x = 2^(127 - s) (clamped to 2^±100) makes every product a small
  // multiple of a power of two, so the sum is exact and any error in decoding 2^-127 (s = 0) or
  // 2^127 (s = 254, beyond f32 once multiplied by |code| >= 2) shows.
  const int64_t cols = 96;
  for (int s : {0, 1, 2, 126, 127, 128, 253, 254}) {
    std::vector<uint8_t> packed(cols / 2), scales(cols / 32, static_cast<uint8_t>(s));
    for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i * 37 + 11);
    const Mxfp4Matrix w{packed.data(), scales.data(), 1, cols};
    std::vector<float> x(cols);
    for (int64_t c = 0; c < cols; ++c)
      x[c] = std::ldexp((c % 3 == 0) ? -1.0f : 1.0f, std::clamp(127 - s, -100, 100));
    double want = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t code = c % 2 == 0 ? packed[c / 2] & 0x0f : packed[c / 2] >> 4;
      want += quant::e2m1_to_f32(code) * std::ldexp(1.0, s - 127) * x[c];
    }
    for (Isa isa : supported_isas()) {
      float y = 0.0f;
      detail::matmul_variant(isa).mxfp4(w, x.data(), 1, &y, 0, 1);
      EXPECT_EQ(static_cast<double>(y), want) << base::isa_name(isa) << " scale " << s;
    }
  }
}

TEST(Matmul, Mxfp4NanScaleGivesNanInThatRowOnly) {
  std::mt19937 rng(6);
  RandomMxfp4 w(4, 160, rng);
  const_cast<uint8_t*>(w.m.scales)[2 * 5 + 3] = 255;  // row 2, block 3
  RandomX x(1, 160, rng);
  for (Isa isa : supported_isas()) {
    std::vector<float> y(4);
    detail::matmul_variant(isa).mxfp4(w.m, x.x, 1, y.data(), 0, 4);
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(std::isnan(y[r]), r == 2) << base::isa_name(isa) << " row " << r;
  }
}

TEST(Matmul, FindScaleNanEveryVariant) {
  std::mt19937 rng(7);
  for (Isa isa : supported_isas()) {
    const MatmulVariant& v = detail::matmul_variant(isa);
    for (int64_t n : {1, 31, 32, 33, 63, 64, 65, 200, 1000}) {
      std::vector<uint8_t> s(n + 1);
      for (auto& b : s) b = static_cast<uint8_t>(rng() % 255);
      EXPECT_EQ(v.find_scale_nan(s.data() + 1, n), -1);
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<uint8_t> t = s;
        t[1 + at] = 255;
        if (at + 1 < n) t[1 + n - 1] = 255;  // a later NaN must not hide the first
        EXPECT_EQ(v.find_scale_nan(t.data() + 1, n), at) << base::isa_name(isa) << " n=" << n;
      }
      std::vector<uint8_t> past = s;
      past.push_back(255);  // a NaN just past the end is not part of the array
      EXPECT_EQ(v.find_scale_nan(past.data() + 1, n), -1);
    }
  }
}

TEST(Matmul, CheckScalesNamesTensorRowAndBlock) {
  std::vector<uint8_t> scales(3072 * 112, 120);
  EXPECT_NO_THROW(check_mxfp4_scales(scales.data(), 3072, 112, "x"));
  scales[1000 * 112 + 57] = 255;
  try {
    check_mxfp4_scales(scales.data(), 3072, 112, "layer 5 expert 17 w1.weight_scale");
    FAIL() << "no error";
  } catch (const base::Error& e) {
    EXPECT_STREQ(
        e.what(),
        "layer 5 expert 17 w1.weight_scale: E8M0 scale byte 255 (NaN) at row 1000 block 57");
  }
}

TEST(Matmul, PublicEntryPointsUseTheSelectedVariant) {
  std::mt19937 rng(9);
  RandomMxfp4 w(33, 256, rng);
  RandomBf16 wb(33, 70, rng);
  RandomX x(3, 256, rng), xb(3, 70, rng);
  const MatmulVariant& v = detail::matmul_variant(base::selected_isa());
  base::ThreadPool pool(2);
  std::vector<float> a(3 * 33), b(3 * 33), c(3 * 33);
  matmul(w.m, x.x, 3, a.data());
  matmul(w.m, x.x, 3, b.data(), pool);
  detail::matmul(v, pool, w.m, x.x, 3, c.data());
  for (size_t k = 0; k < a.size(); ++k)
    ASSERT_TRUE(bits(a[k]) == bits(c[k]) && bits(b[k]) == bits(c[k]));
  matmul(wb.m, xb.x, 3, a.data());
  matmul_rows(wb.m, xb.x, 3, b.data(), 0, 33);
  detail::matmul(v, pool, wb.m, xb.x, 3, c.data());
  for (size_t k = 0; k < a.size(); ++k)
    ASSERT_TRUE(bits(a[k]) == bits(c[k]) && bits(b[k]) == bits(c[k]));
}

TEST(Matmul, DequantRowRange) {
  std::mt19937 rng(10);
  RandomMxfp4 w(6, 64, rng);
  std::vector<float> all(6 * 64), part(2 * 64);
  dequant_mxfp4(w.m, 0, 6, all.data());
  dequant_mxfp4(w.m, 3, 5, part.data());
  for (int64_t k = 0; k < 2 * 64; ++k) ASSERT_EQ(bits(part[k]), bits(all[3 * 64 + k]));
  const uint16_t b[3] = {0x3f80, 0xc000, 0x0001};
  float f[3];
  dequant_bf16(b, 3, f);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(bits(f[2]), 0x00010000u);
}

}  // namespace
}  // namespace deltafin::kernels
