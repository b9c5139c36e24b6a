// GPU tests of the tensor-core MXFP4 products (gemv_mxfp4_tc.h), part of deltafin_cuda_gpu_tests:
// exact where every sum is exact (one weight a row: the decode of every code and scale, the split
// of the activations and every position of the fragments), within the tensor cores' truncation
// bound of the fp64 reference on random data, and row-count independence (memcmp of rows for
// n = 1..20, every compiled block shape, grouped tasks against their single launches).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemv.h"
#include "cuda/gemv_mxfp4_tc.h"
#include "cuda/gpu_test_util.h"
#include "quant/mxfp4.h"

namespace deltafin::cuda {
namespace {

using testing::DeviceBuffer;
using testing::DeviceCodes;
using testing::expect;
using testing::Mxfp4Host;
using testing::random_mxfp4;
using testing::random_x;
using testing::same_bits;

constexpr double kE2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

double e2m1_value(int code) { return (code & 8 ? -1.0 : 1.0) * kE2m1[code & 7]; }

// y for n activation rows through matmul_tc, one launch.
std::vector<float> run_tc(const Mxfp4Host& w, const DeviceBuffer<uint8_t>& packed,
                          const DeviceBuffer<uint8_t>& scales, const DeviceBuffer<float>& x,
                          int64_t n) {
  DeviceBuffer<float> y(n * w.rows);
  matmul_tc(DeviceMxfp4{packed.ptr, scales.ptr, w.rows, w.cols}, x.ptr, n, y.ptr);
  return y.download(n * w.rows);
}

// Row r holds one non-zero code, at column (37r + 5) % cols (every position of a 128-column chunk
// over 128 rows), cycling through the 15 codes but 0 and the scales listed (both sides of the
// two-factor switch at 160, the 27 and 254 ends of the exact range) and NaN. The activations
// have 20 significant bits, so code · x is exact in fp32 (1.5 · x needs 21) and the three
// pieces' products sum exactly: every output must equal the fp64 product, rounded once.
void test_tc_one_weight_a_row(std::mt19937& rng, int64_t rows, int64_t cols) {
  const std::string name =
      "mxfp4 tc one weight a row " + std::to_string(rows) + "x" + std::to_string(cols);
  const int kScales[] = {27, 34, 60, 100, 118, 127, 130, 150, 160, 161, 180, 200, 254, 255};
  const int64_t groups = cols / 32, max_n = 16;
  Mxfp4Host w{rows, cols, std::vector<uint8_t>(rows * cols / 2, 0),
              std::vector<uint8_t>(rows * groups, 127)};
  std::vector<int64_t> hot(rows);
  std::vector<int> code(rows), scale(rows);
  for (int64_t r = 0; r < rows; ++r) {
    hot[r] = (37 * r + 5) % cols;
    code[r] = 1 + static_cast<int>(r % 15);
    if (code[r] == 8) code[r] = 1 + static_cast<int>((r / 15) % 7);  // -0: take a positive code
    scale[r] = kScales[r % (sizeof(kScales) / sizeof(kScales[0]))];
    uint8_t& b = w.packed[r * cols / 2 + hot[r] / 2];
    b = static_cast<uint8_t>(hot[r] % 2 ? code[r] << 4 : code[r]);
    w.scales[r * groups + hot[r] / 32] = static_cast<uint8_t>(scale[r]);
  }
  // 20 significant bits, exponents such that the largest scale's products stay finite.
  std::uniform_int_distribution<int> mant(1 << 19, (1 << 20) - 1), exp(-8, 6), sign(0, 1);
  std::vector<float> x(max_n * cols);
  for (auto& v : x)
    v = static_cast<float>((sign(rng) ? -1.0 : 1.0) * std::ldexp(mant(rng), exp(rng) - 19));
  for (int64_t r = 0; r < rows; ++r)  // the 254 rows: small enough activations
    if (scale[r] == 254)
      for (int64_t i = 0; i < max_n; ++i)
        x[i * cols + hot[r]] = std::ldexp(x[i * cols + hot[r]], -40);
  DeviceCodes d_packed(w.packed);
  DeviceBuffer<uint8_t> d_scales(w.scales);
  DeviceBuffer<float> d_x(x);
  int bad = 0;
  std::string first;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}}) {
    const std::vector<float> y = run_tc(w, d_packed, d_scales, d_x, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        const double wv =
            scale[r] == 255 ? NAN : e2m1_value(code[r]) * std::ldexp(1.0, scale[r] - 127);
        const float want = static_cast<float>(wv * x[i * cols + hot[r]]);
        const float got = y[i * rows + r];
        if (!same_bits(&got, &want, 1)) {
          if (bad++ == 0)
            first = "n=" + std::to_string(n) + " row " + std::to_string(i) + " output " +
                    std::to_string(r) + " (code " + std::to_string(code[r]) + ", scale " +
                    std::to_string(scale[r]) + ", column " + std::to_string(hot[r]) +
                    "): " + std::to_string(got) + " want " + std::to_string(want);
        }
      }
  }
  expect(bad == 0, name + ": every output == the exact product (" + std::to_string(bad) +
                       " differ; first " + first + ")");
  std::printf("ok   %s: every code, scale and fragment position exact\n", name.c_str());
}

// Random weights (scales 2^-15..2^5) and activations: rows of any n equal n = 1's bit for bit,
// and every output is within the truncation bound of the fp64 reference: each of the
// 3 · cols / 16 tensor-core steps adds at most one unit in the last place (2^-23) of a partial
// sum bounded by sum |w x|. Also reports the worst error against the exact kernel's.
void test_tc_random(std::mt19937& rng, int64_t rows, int64_t cols, int64_t max_n) {
  const std::string name = "mxfp4 tc " + std::to_string(rows) + "x" + std::to_string(cols);
  const Mxfp4Host w = random_mxfp4(rng, rows, cols);
  const std::vector<float> x = random_x(rng, max_n * cols);
  DeviceCodes d_packed(w.packed);
  DeviceBuffer<uint8_t> d_scales(w.scales);
  DeviceBuffer<float> d_x(x), d_y(max_n * rows);
  const DeviceMxfp4 dw{d_packed.ptr, d_scales.ptr, rows, cols};
  std::vector<float> single(max_n * rows);
  for (int64_t i = 0; i < max_n; ++i) {
    matmul_tc(dw, d_x.ptr + i * cols, 1, d_y.ptr);
    const auto y = d_y.download(rows);
    std::copy(y.begin(), y.end(), single.begin() + i * rows);
  }
  bool same = true;
  for (int64_t n = 2; n <= max_n; ++n) {
    matmul_tc(dw, d_x.ptr, n, d_y.ptr);
    const auto y = d_y.download(n * rows);
    if (!same_bits(y.data(), single.data(), n * rows)) {
      same = false;
      expect(false, name + ": n=" + std::to_string(n) + " rows == n=1 rows (memcmp)");
    }
  }
  for (const detail::Mxfp4TcShape& shape : detail::mxfp4_tc_shapes()) {  // the same bits
    detail::set_mxfp4_tc_shape(shape);
    matmul_tc(dw, d_x.ptr, max_n, d_y.ptr);
    expect(same_bits(d_y.download(max_n * rows).data(), single.data(), max_n * rows),
           name + ": shape " + detail::mxfp4_tc_shape_name(shape) + " == the default (memcmp)");
  }
  detail::set_mxfp4_tc_shape({});
  matmul(dw, d_x.ptr, max_n, d_y.ptr);
  const std::vector<float> exact = d_y.download(max_n * rows);

  std::vector<float> dense(rows * cols);
  quant::dequant_mxfp4_rows(w.packed.data(), w.scales.data(), cols, 0, rows, dense.data());
  const double steps = 3.0 * cols / 16;
  int bad = 0;
  double worst_tc = 0, worst_exact = 0;
  for (int64_t i = 0; i < max_n; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0, abs_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(dense[r * cols + c]) * x[i * cols + c];
        ref += p;
        abs_sum += std::fabs(p);
      }
      const double err = std::fabs(single[i * rows + r] - ref);
      if (!(err <= (steps + 2) * std::ldexp(1.0, -23) * abs_sum + 1e-30)) ++bad;
      worst_tc = std::fmax(worst_tc, err / abs_sum);
      worst_exact = std::fmax(worst_exact, std::fabs(exact[i * rows + r] - ref) / abs_sum);
    }
  expect(bad == 0, name + ": within the truncation bound of the fp64 reference (" +
                       std::to_string(bad) + " outside)");
  std::printf(
      "ok   %s n=1..%lld: rows independent%s, max |y-ref|/sum|wx| = %.3g (exact kernel %.3g)\n",
      name.c_str(), static_cast<long long>(max_n), same ? "" : " NOT", worst_tc, worst_exact);
}

void test_tc_bad_shapes() {
  DeviceBuffer<uint8_t> p(64);
  DeviceBuffer<float> x(64), y(64);
  const std::string m = testing::invalid_argument_message([&] {
    matmul_tc(DeviceMxfp4{p.ptr, p.ptr, 4, 48}, x.ptr, 1, y.ptr);
  });
  expect(m.find("cols is 48") != std::string::npos, "mxfp4 tc: cols 48 refused (" + m + ")");
  const std::string g =
      testing::invalid_argument_message([&] { matmul_grouped_tc(nullptr, 1, 4, 64, 1); });
  expect(g.find("tasks is null") != std::string::npos, "mxfp4 tc grouped: null table refused");
}

}  // namespace

// The shape choice, a host check (no GPU needed): K3's grouped experts and one matrix alone on a
// 132-SM card, at one, two, eight and sixteen activation rows, without and with the wgmma kernel.
void test_tc_pick() {
  const auto name = [](int64_t rows, int64_t count, int64_t n, bool wgmma = false) {
    return detail::mxfp4_tc_shape_name(detail::mxfp4_tc_pick(rows, count, n, 132, wgmma));
  };
  const bool ok =
      name(3072, 32, 8) == "8 warps of 32 rows" && name(3584, 16, 8) == "8 warps of 32 rows" &&
      name(3584, 0, 8) == "4 warps of 32 rows" && name(3072, 1, 16) == "4 warps of 32 rows" &&
      name(3072, 32, 1) == "4 warps of 16 rows" && name(3584, 16, 2) == "4 warps of 16 rows" &&
      name(3584, 0, 1) == "4 warps of 16 rows" && name(3072, 4, 3) == "4 warps of 32 rows";
  expect(ok, "mxfp4 tc: the shape picks for K3's experts and one matrix");
  // With wgmma: the gates and ups' 512 blocks fill 97% of 4 waves, the downs' 304 77% of 3.
  const std::string wg = "3 warpgroups of 64 rows (wgmma)";
  const bool ok_wg =
      name(3072, 32, 8, true) == wg && name(3584, 16, 8, true) == "8 warps of 32 rows" &&
      name(3584, 16, 16, true) == wg && name(3072, 32, 16, true) == wg &&
      name(3072, 32, 6, true) == wg && name(3072, 32, 5, true) == "8 warps of 32 rows" &&
      name(3072, 32, 2, true) == "4 warps of 16 rows" &&
      name(3584, 0, 8, true) == "4 warps of 32 rows" &&
      name(3584, 0, 16, true) == "4 warps of 32 rows";
  expect(ok_wg, "mxfp4 tc: the shape picks with the wgmma kernel");
  std::printf("ok   mxfp4 tc shape choice\n");
}

void test_mxfp4_grouped(std::mt19937& rng, int64_t rows, int64_t cols, int count, int64_t max_n,
                        bool tensor_cores);  // gemv_gpu_test.cu

void run_tc_tests() {
  std::mt19937 rng(20261206);
  test_tc_one_weight_a_row(rng, 300, 1056);  // 33 groups: a last chunk of one group
  test_tc_one_weight_a_row(rng, 200, 3584);
  test_tc_random(rng, 37, 1056, 20);  // rows short of a tile, n past one 16-row pass
  test_tc_random(rng, 300, 3584, 16);
  test_tc_random(rng, 1000, 3072, 9);
  test_mxfp4_grouped(rng, 37, 1056, 5, 4, true);
  test_mxfp4_grouped(rng, 300, 3584, 18, 16, true);
  test_mxfp4_grouped(rng, 130, 3072, 6, 8, true);
  for (const detail::Mxfp4TcShape& shape : detail::mxfp4_tc_shapes()) {
    detail::set_mxfp4_tc_shape(shape);  // every shape: grouped against single again
    test_mxfp4_grouped(rng, 300, 3584, 18, 16, true);
    test_tc_one_weight_a_row(rng, 200, 3584);
  }
  detail::set_mxfp4_tc_shape({});
  expect(!testing::invalid_argument_message([] { detail::set_mxfp4_tc_shape({6}); }).empty(),
         "mxfp4 tc: a shape of 6 warps refused");
  expect(!testing::invalid_argument_message([] {
            detail::set_mxfp4_tc_shape({8, 24});
          }).empty(),
         "mxfp4 tc: a shape of 24 rows a warp refused");
  test_tc_bad_shapes();
}

}  // namespace deltafin::cuda
