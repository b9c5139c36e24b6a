// AVX-512 matmul. MXFP4: 64 packed bytes (4 blocks, 128 elements) are read as 16 dwords; shifting
// them right by 4k puts nibble k of every dword in the low 4 bits, where vpermps looks its E2M1
// value up in a 16-float table. That vector holds elements 8j + k (lane j), so activations are
// laid out once per call to match, and the four block scales are applied to the per-lane sums of a
// group with one FMA. BF16: a dword holds elements 2j (low half) and 2j + 1 (high half); a shift
// and a mask make both f32 without shuffles, against activations split into even and odd halves.
// GCC 12 flags its own AVX-512 intrinsics (the _mm512_undefined_* they start from) as
// uninitialized after inlining: GCC bug 105593, fixed in GCC 13.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/batch_blocks.h"
#include "kernels/matmul_variant.h"
#include "quant/e2m1.h"

namespace deltafin::kernels::detail::avx512 {
namespace {

constexpr int64_t kMxGroupElems = 128;  // elements per 64 packed bytes (one MXFP4 step)
constexpr int64_t kBfChunkElems = 32;   // bf16 elements per 64 bytes (one BF16 step)

// Weights are prefetched this far ahead of the load that uses them. The hardware prefetcher alone
// keeps too few lines in flight at the rate these loops consume them when DRAM latency is high (a
// busy host): measured on the 2-core VM under load, 4 KiB ahead raised the cold MXFP4 GEMV from
// about 0.4 to 0.75 of the read bandwidth and BF16 from 0.75 to 1.0.
constexpr int64_t kPrefetchBytes = 4096;

// Activation rows per register block: 8 rows of accumulators and partial sums plus the decoded
// weights fit the 32 zmm registers.
constexpr int64_t kBlockRows = 8;
// Batches above 2 rows run in tiles of kTileRows weight rows by kTileSteps column steps, so the
// activation slice of a block (8 rows x 512 columns = 16 KiB) and the weight tile stay in L1 while
// every weight row of the tile uses them. Accumulators live in memory between column steps, which
// does not change their bits: each output keeps one fixed sequence of operations.
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileSteps = 4;  // MXFP4 groups (512 columns); BF16 uses 4x as many chunks
// The MXFP4 kernel decodes the scales of 4 groups at once from a group index that is a multiple
// of 4, which every tile start is.
static_assert(kTileSteps % 4 == 0);
constexpr int64_t kMaxAccPerRow = 2;

// Runs `op` over weight rows [r0, r1) for n activation rows laid out at xp (x_stride apart) and
// writes y[i * rows + r]. Op provides kAccPerRow, kStepsPerTile, n_steps, run<kB>(r, s0, s1, xp,
// x_stride, acc) over column steps [s0, s1) with acc [kB][kAccPerRow] in memory, and reduce(acc).
template <typename Op>
void drive(const Op& op, const float* xp, int64_t x_stride, int64_t n, float* y, int64_t rows,
           int64_t r0, int64_t r1, __m512* acc_buf) {
  constexpr int64_t kA = Op::kAccPerRow;
  const bool tiled = n > 2;
  const int64_t tile_rows = tiled ? kTileRows : 1;
  const int64_t tile_steps = tiled ? Op::kStepsPerTile : op.n_steps;
  for (int64_t rt = r0; rt < r1; rt += tile_rows) {
    const int64_t re = std::min(r1, rt + tile_rows);
    for (int64_t k = 0; k < (re - rt) * n * kA; ++k) acc_buf[k] = _mm512_setzero_ps();
    for (int64_t s0 = 0; s0 < op.n_steps; s0 += tile_steps) {
      const int64_t s1 = std::min(op.n_steps, s0 + tile_steps);
      for (int64_t i0 = 0; i0 < n; i0 += kBlockRows)
        with_block<kBlockRows>(n - i0, [&](auto b) {
          for (int64_t r = rt; r < re; ++r)
            op.template run<decltype(b)::value>(r, s0, s1, xp + i0 * x_stride, x_stride,
                                                acc_buf + ((r - rt) * n + i0) * kA);
        });
    }
    for (int64_t r = rt; r < re; ++r)
      for (int64_t i = 0; i < n; ++i)
        y[i * rows + r] = op.reduce(acc_buf + ((r - rt) * n + i) * kA);
  }
}

// Scratch for one call: the prepared activations followed by the accumulator tile.
struct Scratch {
  float* xp;
  __m512* acc;
};
Scratch scratch(int64_t xp_floats, int64_t n) {
  const int64_t xp_padded = (xp_floats + 15) / 16 * 16;
  float* base = thread_scratch(xp_padded + kTileRows * n * kMaxAccPerRow * 16);
  return {base, reinterpret_cast<__m512*>(base + xp_padded)};
}

// x [n, cols] -> xp [n, groups * 128]: within group g, vector k lane j holds x[128g + 8j + k]
// (zero past cols, so a partial last group contributes exactly 0).
void prepare_mxfp4_x(const float* x, int64_t n, int64_t cols, int64_t stride, float* xp) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * cols;
    float* out = xp + i * stride;
    for (int64_t g = 0; g < stride / kMxGroupElems; ++g)
      for (int64_t k = 0; k < 8; ++k)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t c = g * kMxGroupElems + 8 * j + k;
          out[g * kMxGroupElems + 16 * k + j] = c < cols ? xi[c] : 0.0f;
        }
  }
}

// Block scales as f32: 2^(s - 127), built as s << 23; fixupimm then turns s = 0 (bits 0) into the
// subnormal 2^-127 and s = 255 (+Inf) into NaN. Sixteen scales (four groups) are decoded at once;
// group u of them is spread to lanes 4b..4b+3 = scale of its block b by one vpermps.
struct ScaleDecoder {
  __m512 min_scale = _mm512_castsi512_ps(_mm512_set1_epi32(0x00400000));
  // vfixupimm response per input class (4 bits each, class 0 lowest): QNaN, SNaN -> pass,
  // zero -> keep min_scale, one -> pass, -Inf -> pass, +Inf -> QNaN, negative, positive -> pass.
  __m512i fixup = _mm512_set1_epi32(0x11311011);

  // Scales of blocks [0, n_valid) of `s` (n_valid <= 16; bytes past it are not read).
  __m512 decode16(const uint8_t* s, int64_t n_valid) const {
    const __mmask16 m =
        n_valid >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << n_valid) - 1);
    const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, s)), 23);
    return _mm512_fixupimm_ps(min_scale, _mm512_castsi512_ps(bits), fixup, 0);
  }
  static __m512i spread(int u) {
    const int b = 4 * u;
    return _mm512_set_epi32(b + 3, b + 3, b + 3, b + 3, b + 2, b + 2, b + 2, b + 2, b + 1, b + 1,
                            b + 1, b + 1, b, b, b, b);
  }
};

struct Mxfp4Op {
  static constexpr int64_t kAccPerRow = 1;
  static constexpr int64_t kStepsPerTile = kTileSteps;
  const Mxfp4Matrix& w;
  int64_t n_blocks = w.cols / 32;
  int64_t full_groups = n_blocks / 4, tail_blocks = n_blocks % 4;
  int64_t n_steps = full_groups + (tail_blocks > 0 ? 1 : 0);
  __m512 table = _mm512_loadu_ps(quant::kE2m1Values);
  ScaleDecoder scales;

  // The per-row sequence of operations does not depend on kB, so batches equal n = 1 bit for bit.
  // Kept out of line so that each batch size gets the registers to itself.
  template <int kB>
  __attribute__((noinline)) void run(int64_t r, int64_t g0, int64_t g1, const float* xp,
                                     int64_t x_stride, __m512* acc_mem) const {
    const uint8_t* wp = w.packed + r * (w.cols / 2);
    const uint8_t* sp = w.scales + r * n_blocks;
    const __m512 lut = table;
    const ScaleDecoder dec = scales;
    const float* xr[kB];
    __m512 acc[kB];
    for (int i = 0; i < kB; ++i) {
      acc[i] = acc_mem[i];
      xr[i] = xp + i * x_stride;
    }
    auto group = [&](__m512i q, __m512 sc, int64_t g) {
      const int64_t off = g * kMxGroupElems;
      __m512 p[kB];
      const __m512 v0 = _mm512_permutexvar_ps(q, lut);
      for (int i = 0; i < kB; ++i) p[i] = _mm512_mul_ps(v0, _mm512_load_ps(xr[i] + off));
      for (int k = 1; k < 8; ++k) {
        const __m512 v = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4 * k), lut);
        for (int i = 0; i < kB; ++i)
          p[i] = _mm512_fmadd_ps(v, _mm512_load_ps(xr[i] + off + 16 * k), p[i]);
      }
      for (int i = 0; i < kB; ++i) acc[i] = _mm512_fmadd_ps(p[i], sc, acc[i]);
    };
    // Column tiles start at multiples of 4 groups, so g0 is one too.
    const __m512i spread0 = ScaleDecoder::spread(0), spread1 = ScaleDecoder::spread(1),
                  spread2 = ScaleDecoder::spread(2), spread3 = ScaleDecoder::spread(3);
    for (int64_t gc = g0; gc < g1; gc += 4) {
      const __m512 sc16 = dec.decode16(sp + 4 * gc, n_blocks - 4 * gc);
      for (int u = 0; u < 4 && gc + u < g1; ++u) {
        const int64_t g = gc + u;
        const __m512i spread = u == 0 ? spread0 : u == 1 ? spread1 : u == 2 ? spread2 : spread3;
        const __m512 sc = _mm512_permutexvar_ps(spread, sc16);
        if (g < full_groups) {
          _mm_prefetch(reinterpret_cast<const char*>(wp + 64 * g) + kPrefetchBytes, _MM_HINT_T0);
          group(_mm512_loadu_si512(wp + 64 * g), sc, g);
        } else {  // the partial last group: 1-3 blocks
          const __mmask16 m = static_cast<__mmask16>((1u << (4 * tail_blocks)) - 1);
          group(_mm512_maskz_loadu_epi32(m, wp + 64 * g), sc, g);
        }
      }
    }
    for (int i = 0; i < kB; ++i) acc_mem[i] = acc[i];
  }
  float reduce(const __m512* acc) const { return _mm512_reduce_add_ps(acc[0]); }
};

// x [n, cols] -> xp [n, chunks * 32]: chunk c holds x[32c + 2j] in lanes 0..15 and x[32c + 2j + 1]
// in lanes 16..31, zero past cols.
void prepare_bf16_x(const float* x, int64_t n, int64_t cols, int64_t stride, float* xp) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * cols;
    float* out = xp + i * stride;
    for (int64_t c = 0; c < stride / kBfChunkElems; ++c)
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t even = c * kBfChunkElems + 2 * j;
        out[c * kBfChunkElems + j] = even < cols ? xi[even] : 0.0f;
        out[c * kBfChunkElems + 16 + j] = even + 1 < cols ? xi[even + 1] : 0.0f;
      }
  }
}

struct Bf16Op {
  static constexpr int64_t kAccPerRow = 2;  // even and odd elements
  static constexpr int64_t kStepsPerTile = kTileSteps * 4;
  const Bf16Matrix& w;
  int64_t full_chunks = w.cols / kBfChunkElems, tail = w.cols % kBfChunkElems;
  int64_t n_steps = full_chunks + (tail > 0 ? 1 : 0);
  __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));

  template <int kB>
  __attribute__((noinline)) void run(int64_t r, int64_t c0, int64_t c1, const float* xp,
                                     int64_t x_stride, __m512* acc_mem) const {
    const uint16_t* wr = w.data + r * w.cols;
    const __m512i mask = high_half;
    const float* xr[kB];
    __m512 acc_even[kB], acc_odd[kB];
    for (int i = 0; i < kB; ++i) {
      acc_even[i] = acc_mem[2 * i];
      acc_odd[i] = acc_mem[2 * i + 1];
      xr[i] = xp + i * x_stride;
    }
    auto chunk = [&](__m512i q, int64_t c) {
      const int64_t off = c * kBfChunkElems;
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(q, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(q, mask));
      for (int i = 0; i < kB; ++i) {
        acc_even[i] = _mm512_fmadd_ps(even, _mm512_load_ps(xr[i] + off), acc_even[i]);
        acc_odd[i] = _mm512_fmadd_ps(odd, _mm512_load_ps(xr[i] + off + 16), acc_odd[i]);
      }
    };
    const int64_t c_full_end = std::min(c1, full_chunks);
    for (int64_t c = c0; c < c_full_end; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(wr + c * kBfChunkElems) + kPrefetchBytes,
                   _MM_HINT_T0);
      chunk(_mm512_loadu_si512(wr + c * kBfChunkElems), c);
    }
    if (c1 > full_chunks) {
      const __mmask32 m = static_cast<__mmask32>((1ull << tail) - 1);
      chunk(_mm512_maskz_loadu_epi16(m, wr + full_chunks * kBfChunkElems), full_chunks);
    }
    for (int i = 0; i < kB; ++i) {
      acc_mem[2 * i] = acc_even[i];
      acc_mem[2 * i + 1] = acc_odd[i];
    }
  }
  float reduce(const __m512* acc) const {
    return _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
  }
};

// F32 weights are small (conv kernels, gates); a plain register-blocked loop is enough.
template <int kB>
void f32_row(const float* wr, int64_t cols, const float* x, float* y, int64_t y_stride) {
  const int64_t full = cols / 16, tail = cols % 16;
  __m512 acc[kB];
  for (int i = 0; i < kB; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < full; ++c) {
    const __m512 wv = _mm512_loadu_ps(wr + 16 * c);
    for (int i = 0; i < kB; ++i)
      acc[i] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i * cols + 16 * c), acc[i]);
  }
  if (tail > 0) {
    const __mmask16 m = static_cast<__mmask16>((1u << tail) - 1);
    const __m512 wv = _mm512_maskz_loadu_ps(m, wr + 16 * full);
    for (int i = 0; i < kB; ++i)
      acc[i] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + i * cols + 16 * full), acc[i]);
  }
  for (int i = 0; i < kB; ++i) y[i * y_stride] = _mm512_reduce_add_ps(acc[i]);
}

}  // namespace

void mxfp4_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const Mxfp4Op op{w};
  const int64_t stride = op.n_steps * kMxGroupElems;
  const Scratch s = scratch(n * stride, n);
  prepare_mxfp4_x(x, n, w.cols, stride, s.xp);
  drive(op, s.xp, stride, n, y, w.rows, r0, r1, s.acc);
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const Bf16Op op{w};
  const int64_t stride = op.n_steps * kBfChunkElems;
  const Scratch s = scratch(n * stride, n);
  prepare_bf16_x(x, n, w.cols, stride, s.xp);
  drive(op, s.xp, stride, n, y, w.rows, r0, r1, s.acc);
}

void f32_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i0 = 0; i0 < n; i0 += kBlockRows)
      with_block<kBlockRows>(n - i0, [&](auto b) {
        f32_row<decltype(b)::value>(w.data + r * w.cols, w.cols, x + i0 * w.cols,
                                    y + i0 * w.rows + r, w.rows);
      });
}

int64_t find_scale_nan(const uint8_t* scales, int64_t n) {
  const __m512i nan = _mm512_set1_epi8(static_cast<char>(0xff));
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __mmask64 hit = _mm512_cmpeq_epi8_mask(_mm512_loadu_si512(scales + i), nan);
    if (hit) return i + __builtin_ctzll(hit);
  }
  if (i < n) {
    const __mmask64 m = (1ull << (n - i)) - 1;
    const __mmask64 hit =
        _mm512_mask_cmpeq_epi8_mask(m, _mm512_maskz_loadu_epi8(m, scales + i), nan);
    if (hit) return i + __builtin_ctzll(hit);
  }
  return -1;
}

}  // namespace deltafin::kernels::detail::avx512
