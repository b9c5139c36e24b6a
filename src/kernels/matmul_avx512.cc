// AVX-512 matmul. MXFP4: 64 packed bytes (4 blocks, 128 elements) are read as 16 dwords; shifting
// them right by 4k puts nibble k of every dword in the low 4 bits, where vpermps looks its E2M1
// value up in a 16-float table. That vector holds elements 8j + k (lane j), so activations are
// laid out once per call to match, and the four block scales are applied to the per-lane sums of a
// group with one FMA. BF16: a dword holds elements 2j (low half) and 2j + 1 (high half); a shift
// and a mask make both f32 without shuffles, against activations split into even and odd halves.
// GCC 12 flags its own AVX-512 intrinsics (the _mm512_undefined_* they start from) as
// uninitialized after inlining: GCC bug 105593, fixed in GCC 13.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
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
// Batches (n >= Op::kMinTiledRows) run in tiles of up to kTileRows weight rows by a few column
// steps, so that the tile's activations (about kXTileBytes) and accumulators (at most
// kAccTileBytes) stay in L1 while every weight row of the tile uses them: a K3 activation row alone
// is 28-48 KiB, so untiled even two rows stream from L2 for every weight row. Each weight step is
// decoded once per block of 8 activation rows. Accumulators live in memory between column tiles,
// which does not change their bits: each output keeps one fixed sequence of operations whatever the
// tile shape.
constexpr int64_t kTileRows = 16;
constexpr int64_t kXTileBytes = 16 << 10;
constexpr int64_t kAccTileBytes = 8 << 10;
constexpr int64_t kMaxAccPerRow = 2;

// Weight rows per tile: up to kTileRows whose accumulators fit kAccTileBytes, at least 4.
template <typename Op>
int64_t tile_rows(int64_t n) {
  if (n < Op::kMinTiledRows) return 1;
  return std::clamp<int64_t>(kAccTileBytes / (n * Op::kAccPerRow * 64), 4, kTileRows);
}

// Column steps per tile for n activation rows: about kXTileBytes of activations, a multiple of
// Op::kStepQuantum (the MXFP4 kernel decodes 4 groups' scales at once from a group index that is a
// multiple of 4, which every tile start then is). Untiled, one tile spans the row.
template <typename Op>
int64_t tile_steps(const Op& op, int64_t n) {
  if (n < Op::kMinTiledRows) return op.n_steps;
  const int64_t steps = kXTileBytes / (n * Op::kStepXBytes) / Op::kStepQuantum * Op::kStepQuantum;
  return std::max<int64_t>(Op::kStepQuantum, steps);
}

// Activations are prepared step-major: step c of row i is at xp + (c * n + i) * E (E =
// Op::kStepElems), so a kernel addresses the rows of a block from one pointer with constant
// offsets, and the activations of a column tile are contiguous (no L1 set collisions between rows
// a multiple of 4 KiB apart, as K3's 7168 and 12288 columns are). `col(c, k)` is the column that
// element k of step c holds; zero past cols, so a partial last step contributes exactly 0.
template <typename Op, typename Col>
void prepare_x(const Op& op, const float* x, int64_t n, int64_t cols, float* xp, Col col) {
  constexpr int64_t kE = Op::kStepElems;
  for (int64_t c = 0; c < op.n_steps; ++c)
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * cols;
      float* out = xp + (c * n + i) * kE;
      for (int64_t k = 0; k < kE; ++k) {
        const int64_t at = col(c, k);
        out[k] = at < cols ? xi[at] : 0.0f;
      }
    }
}

// Runs `op` over weight rows [r0, r1) for n activation rows prepared at xp and writes
// y[i * rows + r]. Op provides kAccPerRow, kStepElems, kStepXBytes, kStepQuantum, n_steps,
// run<kB>(r, s0, s1, x, step_stride, prefetch_bytes, acc) over column steps [s0, s1) with x at
// step s0 of the block's first row, steps step_stride floats apart, acc [kB][kAccPerRow] in
// memory, and reduce(acc).
template <typename Op>
void drive(const Op& op, const float* xp, int64_t n, float* y, int64_t rows, int64_t r0, int64_t r1,
           __m512* acc_buf) {
  constexpr int64_t kA = Op::kAccPerRow;
  constexpr int64_t kE = Op::kStepElems;
  const bool tiled = n >= Op::kMinTiledRows;
  const int64_t t_rows = tile_rows<Op>(n);
  const int64_t steps = tile_steps(op, n);
  // Untiled, a row streams on its own and is prefetched 4 KiB ahead. Tiled, the tile's rows advance
  // together one column tile at a time, so each prefetches its own bytes one tile ahead (further
  // ahead, the prefetched lines of 16 rows crowd the activation tile out of L1).
  const int64_t prefetch_bytes = tiled ? steps * 64 : kPrefetchBytes;
  for (int64_t rt = r0; rt < r1; rt += t_rows) {
    const int64_t re = std::min(r1, rt + t_rows);
    for (int64_t k = 0; k < (re - rt) * n * kA; ++k) acc_buf[k] = _mm512_setzero_ps();
    for (int64_t s0 = 0; s0 < op.n_steps; s0 += steps) {
      const int64_t s1 = std::min(op.n_steps, s0 + steps);
      for (int64_t i0 = 0; i0 < n; i0 += kBlockRows)
        with_block<kBlockRows>(n - i0, [&](auto b) {
          for (int64_t r = rt; r < re; ++r)
            op.template run<decltype(b)::value>(r, s0, s1, xp + (s0 * n + i0) * kE, n * kE,
                                                prefetch_bytes, acc_buf + ((r - rt) * n + i0) * kA);
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

// One MXFP4 group (4 blocks, 128 elements) against kB activation rows 128 floats apart at xg:
// each row's per-lane block sums, then their block scales, into acc. A function rather than a
// lambda, with every row loop unrolled, so that GCC keeps acc in registers.
template <int kB>
__attribute__((always_inline)) inline void mxfp4_group(__m512i q, __m512 sc, __m512 lut,
                                                       const float* xg, __m512 (&acc)[kB]) {
  __m512 p[kB];
  const __m512 v0 = _mm512_permutexvar_ps(q, lut);
#pragma GCC unroll 8
  for (int i = 0; i < kB; ++i) p[i] = _mm512_mul_ps(v0, _mm512_load_ps(xg + i * 128));
#pragma GCC unroll 7
  for (int k = 1; k < 8; ++k) {
    const __m512 v = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4 * k), lut);
#pragma GCC unroll 8
    for (int i = 0; i < kB; ++i)
      p[i] = _mm512_fmadd_ps(v, _mm512_load_ps(xg + i * 128 + 16 * k), p[i]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < kB; ++i) acc[i] = _mm512_fmadd_ps(p[i], sc, acc[i]);
}

// One BF16 chunk (32 elements) against kB activation rows 32 floats apart at xc.
template <int kB>
__attribute__((always_inline)) inline void bf16_chunk(__m512i q, __m512i high_half, const float* xc,
                                                      __m512 (&acc_even)[kB],
                                                      __m512 (&acc_odd)[kB]) {
  const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(q, 16));
  const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(q, high_half));
#pragma GCC unroll 8
  for (int i = 0; i < kB; ++i) {
    acc_even[i] = _mm512_fmadd_ps(even, _mm512_load_ps(xc + i * 32), acc_even[i]);
    acc_odd[i] = _mm512_fmadd_ps(odd, _mm512_load_ps(xc + i * 32 + 16), acc_odd[i]);
  }
}

struct Mxfp4Op {
  static constexpr int64_t kAccPerRow = 1;
  // Two rows run faster untiled (measured, cold K3 expert): their 56 KiB of activations stream
  // from L2 fast enough for the decode, and a tile's bookkeeping costs more than that.
  static constexpr int64_t kMinTiledRows = 3;
  static constexpr int64_t kStepElems = kMxGroupElems;
  static constexpr int64_t kStepXBytes = kMxGroupElems * 4;
  static constexpr int64_t kStepQuantum = 4;
  const Mxfp4Matrix& w;
  int64_t n_blocks = w.cols / 32;
  int64_t full_groups = n_blocks / 4, tail_blocks = n_blocks % 4;
  int64_t n_steps = full_groups + (tail_blocks > 0 ? 1 : 0);
  __m512 table = _mm512_loadu_ps(quant::kE2m1Values);
  ScaleDecoder scales;

  // The per-row sequence of operations does not depend on kB, so batches equal n = 1 bit for bit.
  // Kept out of line so that each batch size gets the registers to itself, and written without
  // lambdas or pointer arrays: GCC then keeps the accumulators in registers and addresses every
  // activation load from one pointer with a constant offset.
  template <int kB>
  __attribute__((noinline)) void run(int64_t r, int64_t g0, int64_t g1, const float* xp,
                                     int64_t step_stride, int64_t prefetch_bytes,
                                     __m512* acc_mem) const {
    const uint8_t* wp = w.packed + r * (w.cols / 2);
    const uint8_t* sp = w.scales + r * n_blocks;
    const __m512 lut = table;
    const ScaleDecoder dec = scales;
    __m512 acc[kB];
#pragma GCC unroll 8
    for (int i = 0; i < kB; ++i) acc[i] = acc_mem[i];
    const __m512i spread[4] = {ScaleDecoder::spread(0), ScaleDecoder::spread(1),
                               ScaleDecoder::spread(2), ScaleDecoder::spread(3)};
    // Column tiles start at multiples of 4 groups, so g0 is one too.
    for (int64_t gc = g0; gc < g1; gc += 4) {
      const __m512 sc16 = dec.decode16(sp + 4 * gc, n_blocks - 4 * gc);
      for (int u = 0; u < 4; ++u) {
        const int64_t g = gc + u;
        if (g >= g1) break;
        const __m512 sc = _mm512_permutexvar_ps(spread[u], sc16);
        const float* xg = xp + (g - g0) * step_stride;
        if (g < full_groups) {
          _mm_prefetch(reinterpret_cast<const char*>(wp + 64 * g) + prefetch_bytes, _MM_HINT_T0);
          mxfp4_group<kB>(_mm512_loadu_si512(wp + 64 * g), sc, lut, xg, acc);
        } else {  // the partial last group: 1-3 blocks
          const __mmask16 m = static_cast<__mmask16>((1u << (4 * tail_blocks)) - 1);
          mxfp4_group<kB>(_mm512_maskz_loadu_epi32(m, wp + 64 * g), sc, lut, xg, acc);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < kB; ++i) acc_mem[i] = acc[i];
  }
  float reduce(const __m512* acc) const { return _mm512_reduce_add_ps(acc[0]); }
};

struct Bf16Op {
  static constexpr int64_t kAccPerRow = 2;  // even and odd elements
  static constexpr int64_t kMinTiledRows = 2;
  static constexpr int64_t kStepElems = kBfChunkElems;
  static constexpr int64_t kStepXBytes = kBfChunkElems * 4;
  static constexpr int64_t kStepQuantum = 4;
  const Bf16Matrix& w;
  int64_t full_chunks = w.cols / kBfChunkElems, tail = w.cols % kBfChunkElems;
  int64_t n_steps = full_chunks + (tail > 0 ? 1 : 0);
  __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));

  template <int kB>
  __attribute__((noinline)) void run(int64_t r, int64_t c0, int64_t c1, const float* xp,
                                     int64_t step_stride, int64_t prefetch_bytes,
                                     __m512* acc_mem) const {
    const uint16_t* wr = w.data + r * w.cols;
    const __m512i mask = high_half;
    __m512 acc_even[kB], acc_odd[kB];
#pragma GCC unroll 8
    for (int i = 0; i < kB; ++i) {
      acc_even[i] = acc_mem[2 * i];
      acc_odd[i] = acc_mem[2 * i + 1];
    }
    const int64_t c_full_end = std::min(c1, full_chunks);
    for (int64_t c = c0; c < c_full_end; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(wr + c * kBfChunkElems) + prefetch_bytes,
                   _MM_HINT_T0);
      bf16_chunk<kB>(_mm512_loadu_si512(wr + c * kBfChunkElems), mask, xp + (c - c0) * step_stride,
                     acc_even, acc_odd);
    }
    if (c1 > full_chunks) {  // the partial last chunk reads only its own elements
      const __mmask32 m = static_cast<__mmask32>((1ull << tail) - 1);
      bf16_chunk<kB>(_mm512_maskz_loadu_epi16(m, wr + full_chunks * kBfChunkElems), mask,
                     xp + (full_chunks - c0) * step_stride, acc_even, acc_odd);
    }
#pragma GCC unroll 8
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

// Int8: 16 weights widened to fp32 per step (vpmovsxbd + vcvtdq2ps) against plain activations,
// into four accumulators per activation row (step c into accumulator c % 4, so the FMA chains
// overlap); the row's scale multiplies the summed products once, after the reduction. Blocks of
// kInt8BlockRows rows keep 16 accumulators in registers; the per-row sequence does not depend on
// the block size.
constexpr int kInt8BlockRows = 4;
template <int kB>
void int8_row(const int8_t* wr, float scale, int64_t cols, const float* x, float* y,
              int64_t y_stride) {
  const int64_t full = cols / 16, tail = cols % 16;
  __m512 acc[kB][4];
  for (int i = 0; i < kB; ++i)
    for (int k = 0; k < 4; ++k) acc[i][k] = _mm512_setzero_ps();
  auto step = [&](__m512 wv, int64_t c, auto load_x) {
    for (int i = 0; i < kB; ++i)
      acc[i][c % 4] = _mm512_fmadd_ps(wv, load_x(x + i * cols + 16 * c), acc[i][c % 4]);
  };
  auto widen = [](__m128i q) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)); };
  auto load = [](const float* p) { return _mm512_loadu_ps(p); };
  int64_t c = 0;
  for (; c + 4 <= full; c += 4) {  // one 64-byte line of weights
    _mm_prefetch(reinterpret_cast<const char*>(wr + 16 * c) + kPrefetchBytes, _MM_HINT_T0);
    for (int64_t k = 0; k < 4; ++k)
      step(widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + 16 * (c + k)))), c + k,
           load);
  }
  for (; c < full; ++c)
    step(widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + 16 * c))), c, load);
  if (tail > 0) {
    const __mmask16 m = static_cast<__mmask16>((1u << tail) - 1);
    step(widen(_mm_maskz_loadu_epi8(m, wr + 16 * full)), full,
         [m](const float* p) { return _mm512_maskz_loadu_ps(m, p); });
  }
  for (int i = 0; i < kB; ++i) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3]));
    y[i * y_stride] = _mm512_reduce_add_ps(sum) * scale;
  }
}

}  // namespace

void mxfp4_rows(const Mxfp4Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const Mxfp4Op op{w};
  const Scratch s = scratch(n * op.n_steps * kMxGroupElems, n);
  // Within group g, vector k lane j holds column 128g + 8j + k.
  prepare_x(op, x, n, w.cols, s.xp,
            [](int64_t g, int64_t e) { return g * kMxGroupElems + 8 * (e % 16) + e / 16; });
  drive(op, s.xp, n, y, w.rows, r0, r1, s.acc);
}

void bf16_rows(const Bf16Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  const Bf16Op op{w};
  const Scratch s = scratch(n * op.n_steps * kBfChunkElems, n);
  // Chunk c holds columns 32c + 2j in lanes 0..15 and 32c + 2j + 1 in lanes 16..31.
  prepare_x(op, x, n, w.cols, s.xp,
            [](int64_t c, int64_t e) { return c * kBfChunkElems + 2 * (e % 16) + e / 16; });
  drive(op, s.xp, n, y, w.rows, r0, r1, s.acc);
}

void f32_rows(const F32Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t i0 = 0; i0 < n; i0 += kBlockRows)
      with_block<kBlockRows>(n - i0, [&](auto b) {
        f32_row<decltype(b)::value>(w.data + r * w.cols, w.cols, x + i0 * w.cols,
                                    y + i0 * w.rows + r, w.rows);
      });
}

void int8_rows(const Int8Matrix& w, const float* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    float scale;
    std::memcpy(&scale, w.scales + 4 * r, 4);
    for (int64_t i0 = 0; i0 < n; i0 += kInt8BlockRows)
      with_block<kInt8BlockRows>(n - i0, [&](auto b) {
        int8_row<decltype(b)::value>(w.q + r * w.cols, scale, w.cols, x + i0 * w.cols,
                                     y + i0 * w.rows + r, w.rows);
      });
  }
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
