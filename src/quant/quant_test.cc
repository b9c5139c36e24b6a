// Tests for the quant types: BF16 rounding, the E2M1 and E8M0 tables, and MXFP4 decoding in both
// checkpoint layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quant/bf16.h"
#include "quant/e2m1.h"
#include "quant/e8m0.h"
#include "quant/int8.h"
#include "quant/mxfp4.h"

namespace deltafin::quant {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

TEST(Bf16, WidensByShift) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
  EXPECT_EQ(bits_of(bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7f80)));
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // Halfway cases: 0x3f808000 lies halfway between 0x3f80 and 0x3f81; ties go to the even 0x3f80.
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808000u)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(float_of(0x3f818000u)), 0x3f82);
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(float_of(0x3f807fffu)), 0x3f80);
  // Rounding up out of the largest finite value overflows to infinity, as IEEE requires.
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

TEST(Bf16, NanStaysNan) {
  const uint16_t b = f32_to_bf16(float_of(0x7fffffffu));
  EXPECT_TRUE(std::isnan(bf16_to_f32(b)));
  const uint16_t s = f32_to_bf16(float_of(0x7f800001u));  // signalling NaN with a low payload
  EXPECT_TRUE(std::isnan(bf16_to_f32(s)));
}

TEST(Bf16, RoundTripsEveryBf16) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), b);
  }
}

TEST(E2m1, TableMatchesOcp) {
  const float expected[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_f32(c), expected[c]);
    EXPECT_EQ(e2m1_to_f32(c + 8), -expected[c]);
    EXPECT_TRUE(std::signbit(e2m1_to_f32(c + 8)));
  }
}

TEST(E8m0, Values) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(126), 0.5f);
  EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(bits_of(e8m0_to_f32(0)), 0x00400000u);  // the subnormal 2^-127, not zero
  EXPECT_TRUE(std::isnan(e8m0_to_f32(kE8m0Nan)));
  const float* t = e8m0_table();
  for (int s = 0; s < 255; ++s) EXPECT_EQ(t[s], e8m0_to_f32(s)) << s;
  EXPECT_TRUE(std::isnan(t[255]));
}

TEST(E8m0, FindsNan) {
  std::vector<uint8_t> s(100, 127);
  EXPECT_EQ(find_e8m0_nan(s.data(), 100), -1);
  s[73] = 255;
  s[90] = 255;
  EXPECT_EQ(find_e8m0_nan(s.data(), 100), 73);
  EXPECT_EQ(find_e8m0_nan(s.data(), 73), -1);
}

TEST(Mxfp4, DecodesKnownBytes) {
  // One row of 32 elements: byte 0 = 0x21 -> element 0 is code 1 (0.5), element 1 is code 2 (1.0);
  // byte 1 = 0xf8 -> element 2 is code 8 (-0), element 3 is code 15 (-6). Scale 2^(129-127) = 4.
  std::vector<uint8_t> packed(16, 0);
  packed[0] = 0x21;
  packed[1] = 0xf8;
  packed[15] = 0x70;
  const uint8_t scale = 129;
  std::vector<float> out(32);
  dequant_mxfp4_rows(packed.data(), &scale, 32, 0, 1, out.data());
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 4.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_TRUE(std::signbit(out[2]));
  EXPECT_EQ(out[3], -24.0f);
  EXPECT_EQ(out[30], 0.0f);
  EXPECT_EQ(out[31], 24.0f);
}

TEST(Mxfp4, RowRangeAndScalesPerBlock) {
  const int64_t rows = 3, cols = 96;  // 3 blocks per row
  std::vector<uint8_t> packed(rows * cols / 2, 0x22), scales(rows * 3);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(120 + i);
  std::vector<float> out(2 * cols);
  dequant_mxfp4_rows(packed.data(), scales.data(), cols, 1, 3, out.data());
  for (int64_t r = 1; r < 3; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(out[(r - 1) * cols + c],
                std::ldexp(1.0f, 120 + static_cast<int>(r * 3 + c / 32) - 127));
}

TEST(Mxfp4, NanScaleDecodesToNan) {
  std::vector<uint8_t> packed(16, 0x11);
  const uint8_t scale = kE8m0Nan;
  std::vector<float> out(32);
  dequant_mxfp4_rows(packed.data(), &scale, 32, 0, 1, out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace deltafin::quant

namespace deltafin::quant {
namespace {

TEST(Int8, ScaleIsMaxOver127AndRoundsToNearestEven) {
  // max |w| = 2.54 gives scale 0.02; 0.03 / 0.02 = 1.5 rounds to 2, 0.05 / 0.02 = 2.5 to 2.
  const float w[] = {2.54f, -2.54f, 0.0f, 1.0f, -0.3f};
  int8_t q[5];
  const float scale = quantize_row_int8(w, 5, q);
  EXPECT_FLOAT_EQ(scale, 2.54f / 127.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[3], 50);
  EXPECT_EQ(q[4], -15);
  const float ties[] = {1.27f, 0.015f, 0.025f, -0.025f};  // scale 0.01: 1.5, 2.5, -2.5
  int8_t qt[4];
  quantize_row_int8(ties, 4, qt);
  EXPECT_EQ(qt[0], 127);
  EXPECT_EQ(qt[1], static_cast<int8_t>(std::nearbyint(0.015f / (1.27f / 127.0f))));
  EXPECT_EQ(qt[2], static_cast<int8_t>(std::nearbyint(0.025f / (1.27f / 127.0f))));
  EXPECT_EQ(qt[3], -qt[2]);
}

TEST(Int8, ZeroRowHasZeroScale) {
  const float w[3] = {0.0f, -0.0f, 0.0f};
  int8_t q[3] = {1, 1, 1};
  EXPECT_EQ(quantize_row_int8(w, 3, q), 0.0f);
  EXPECT_EQ(q[0] | q[1] | q[2], 0);
}

TEST(Int8, ErrorWithinHalfAStep) {
  std::vector<float> w(1000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * i) * 0.1f;
  std::vector<int8_t> q(w.size());
  const float scale = quantize_row_int8(w.data(), 1000, q.data());
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_LE(std::fabs(int8_value(q[i], scale) - w[i]), 0.5 * scale * (1 + 1e-6));
}

}  // namespace
}  // namespace deltafin::quant
