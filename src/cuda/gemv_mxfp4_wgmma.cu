// The tensor-core MXFP4 products on Hopper's warpgroup MMA (gemv_mxfp4_wgmma.h). A block of 3
// warpgroups takes 192 weight rows (16 a warp) through all the columns in chunks of 256 (two
// 128-column sub-chunks: a quad's two loads of a row fill its 128-byte line). A sub-chunk's 8
// k-steps are 8 wgmma.m64nNk16 (N = 8 per column tile, NT tiles for 3n piece columns as in
// gemv_mxfp4_tc.cu) with A decoded into registers in that file's k order, so each row runs the
// same steps in the same order as there, and B read by the tensor cores from shared memory. The
// weights come into shared memory by cp.async up to 3 chunks ahead (a thread reads back only its
// own words), and each 512-column window of the fp32 activations rides in the commit group of
// the chunk two before it; the block splits a window into BF16 pieces in K-major core matrices,
// so no warp waits on an activation load. A sub-chunk's A registers are rewritten only after the
// group that read them (two sub-chunks back) has completed.
#include "cuda/gemv_mxfp4_wgmma.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/gemv_launch.cuh"
#include "cuda/mxfp4_wgmma.cuh"

namespace deltafin::cuda {
namespace {

using namespace gemv;
using namespace wgmma;

constexpr int kWarpgroups = 3;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBlockRows = 64 * kWarpgroups;
static_assert(kBlockRows == detail::kMxfp4WgmmaBlockRows, "the pick sizes the grid by it");
constexpr int kWindowCols = 512;                // activation columns a window
constexpr int kWindowSteps = kWindowCols / 16;  // k-steps a window
constexpr int kRing = 3;                        // fp32 windows: two in flight beside the one split

// The most activation rows NT column tiles take, so one kernel's shared memory is one size.
template <int NT>
__host__ __device__ constexpr int max_rows() {
  return 8 * NT / kPieces;
}
// A window's fp32 activation row in shared memory: 4 floats of padding put consecutive rows 4
// banks apart, so the split's 8-byte loads of 8 rows at one column meet no bank twice.
constexpr int kFp32Pitch = kWindowCols + 4;
template <int NT>
__host__ __device__ constexpr int fp32_window_bytes() {
  return max_rows<NT>() * kFp32Pitch * 4;
}
// One k-step's B: 8·NT columns x 16 k in core matrices of 8 columns x 8 k (128 bytes): column c
// at 256·(c / 8) + 16·(c % 8), k at 128·(k / 8) + 2·(k % 8).
template <int NT>
__host__ __device__ constexpr int step_bytes() {
  return NT * 256;
}
constexpr int kChunkBytes = kThreads * 64;  // a chunk's weights: 4 words of 16 bytes a thread
template <int NT>
__host__ __device__ constexpr int window_bytes() {
  return kWindowSteps * step_bytes<NT>() + kRing * fp32_window_bytes<NT>();
}
// Slots of the weight ring: up to 4 chunks in flight or waiting, as many as fit beside the
// windows (3 at six column tiles).
template <int NT>
__host__ __device__ constexpr int weight_slots() {
  int d = 4;
  while (window_bytes<NT>() + d * kChunkBytes > 227 * 1024) --d;
  return d;
}
template <int NT>
__host__ __device__ constexpr int smem_bytes() {
  return window_bytes<NT>() + weight_slots<NT>() * kChunkBytes;
}

template <int NT>
__device__ __forceinline__ void wgmma_body(const DeviceMxfp4Task& task, int rows, int cols) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, wg = threadIdx.x >> 7;
  const int g = lane >> 2, t = lane & 3;
  const int n = task.n, groups = cols >> 5;
  const int subs = (groups + 3) >> 2, chunks = (subs + 1) >> 1;
  const int windows = (cols + kWindowCols - 1) / kWindowCols;
  const int row_a = blockIdx.x * kBlockRows + wg * 64 + warp * 16 + g;
  const uint8_t* wp[2];
  const uint8_t* sp[2];
  bool present[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row_a + 8 * h;
    present[h] = r < rows;
    const int64_t rr = present[h] ? r : 0;
    wp[h] = task.packed + rr * (cols / 2) + t * 16;
    sp[h] = task.scales + rr * groups + t;
  }
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint64_t window_desc = b_descriptor(base);  // the B window's first k-step
  constexpr int kBWindowBytes = kWindowSteps * step_bytes<NT>();
  const uint32_t fp32_base = base + kBWindowBytes;
  const float* fp32 = reinterpret_cast<const float*>(smem + kBWindowBytes);

  // Window w's fp32 activations (n rows, the columns the matrix has) into ring slot w % kRing.
  // A thread copies the same 16 bytes (column 4q) of every third activation row: the block's
  // threads are three times a row's 128 pieces.
  static_assert(kThreads % (kWindowCols / 4) == 0, "a window row's pieces divide the threads");
  constexpr int kRowStep = kThreads / (kWindowCols / 4);
  const int copy_q = static_cast<int>(threadIdx.x) % (kWindowCols / 4);
  const int copy_r = static_cast<int>(threadIdx.x) / (kWindowCols / 4);
  const auto copy_window_rows = [&](int w) {
    if (w < windows && 4 * copy_q < cols - w * kWindowCols) {  // columns are a multiple of 32
      uint32_t to = fp32_base + (w % kRing) * fp32_window_bytes<NT>() +
                    (copy_r * kFp32Pitch + 4 * copy_q) * 4;
      const float* from =
          task.x + static_cast<int64_t>(copy_r) * cols + w * kWindowCols + 4 * copy_q;
      for (int r = copy_r; r < n; r += kRowStep) {
        cp_async16(to, from, true);
        to += kRowStep * kFp32Pitch * 4;
        from += static_cast<int64_t>(kRowStep) * cols;
      }
    }
  };
  const auto copy_window = [&](int w) {
    copy_window_rows(w);
    cp_async_commit();
  };
  // Window w (ring slot w % kRing) into the B window. An item is k-step s of the window
  // for activation row r: element k of the step is column 8q + 2hh + (k / 8) + 4b of group t2
  // of sub-chunk s / 8, where (q, hh) = (s % 8 / 2, s % 2) and k % 8 = 2·t2 + b, so 8 float pairs
  // give its 16 k values, and each piece p is two 16-byte rows (k / 8 = 0 and 1) of column
  // p·n + r's core matrices, stored 8 bytes at a time. Consecutive threads take consecutive rows,
  // so 8 of them store into distinct banks when n >= 8. Columns past the matrix's get zeros.
  const auto split_window = [&](int w) {
    const int width = cols - w * kWindowCols;
    const float* ring = fp32 + (w % kRing) * (fp32_window_bytes<NT>() / 4);
    uint8_t* window = smem;
    for (int i = threadIdx.x; i < n * kWindowSteps; i += kThreads) {
      const int r = i % n, step = i / n;
      const int col0 = 128 * (step >> 3) + 8 * ((step & 7) >> 1) + 2 * (step & 1);
      const float* from = ring + r * kFp32Pitch + col0;
      uint8_t* to = window + step * step_bytes<NT>();
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // groups t2 = 2·half, 2·half + 1: 8 bytes a row
        uint2 low[kPieces], high[kPieces];    // k / 8 = 0 and 1
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int t2 = 2 * half + u;
          const bool in = col0 + 32 * t2 < width;
          const float2 v0 =
              in ? *reinterpret_cast<const float2*>(from + 32 * t2) : make_float2(0.0f, 0.0f);
          const float2 v1 =
              in ? *reinterpret_cast<const float2*>(from + 32 * t2 + 4) : make_float2(0.0f, 0.0f);
          const Pieces e0 = split3(v0.x), e1 = split3(v1.x);
          const Pieces o0 = split3(v0.y), o1 = split3(v1.y);
#pragma unroll
          for (int p = 0; p < kPieces; ++p) {
            (u ? low[p].y : low[p].x) = pack_bf16x2(e0.p[p], e1.p[p]);
            (u ? high[p].y : high[p].x) = pack_bf16x2(o0.p[p], o1.p[p]);
          }
        }
#pragma unroll
        for (int p = 0; p < kPieces; ++p) {
          const int c = p * n + r;
          uint8_t* row = to + (c >> 3) * 256 + (c & 7) * 16 + 8 * half;
          *reinterpret_cast<uint2*>(row) = low[p];
          *reinterpret_cast<uint2*>(row + 128) = high[p];
        }
      }
    }
  };
  // Columns from 3n stay zero: the split writes only columns below 3n.
  for (int i = threadIdx.x; i < kBWindowBytes / 4; i += kThreads)
    reinterpret_cast<uint32_t*>(smem)[i] = 0u;

  float acc[4 * NT];
#pragma unroll
  for (int i = 0; i < 4 * NT; ++i) acc[i] = 0.0f;
  fence_operands(acc);
  uint32_t a[2][8][4];
  // Sub-chunk m of chunk c: its A fragments into a[m], then its 8 k-steps.
  const auto run_sub = [&](const uint4(&wq)[2][2], const uint32_t(&sq)[2][2], int c, int m) {
    wgmma_wait<1>();  // the group that read a[m] (two sub-chunks back) is done
    const bool two = sq[m][0] > 160u || sq[m][1] > 160u;
    const uint4 wm[2] = {wq[m][0], wq[m][1]};
    const uint32_t sm[2] = {sq[m][0], sq[m][1]};
    if (__any_sync(kFullMask, two))
      decode_sub<true>(wm, sm, a[m]);
    else
      decode_sub<false>(wm, sm, a[m]);
    wgmma_fence();
    fence_operands(acc);
    // The sub-chunk's first step in the B window, then a step further each k-step: the
    // descriptor's address field counts 16-byte units and stays below 2^14 (shared memory is
    // under 256 KB), so adding to the descriptor moves its address alone.
    const uint64_t first = window_desc + static_cast<uint64_t>((2 * c + m) % (kWindowSteps / 8) *
                                                               (8 * step_bytes<NT>() / 16));
#pragma unroll
    for (int j = 0; j < 8; ++j)
      Wgmma<NT>::run(acc, a[m][j], first + static_cast<uint64_t>(j * (step_bytes<NT>() / 16)));
    wgmma_commit();
    fence_operands(acc);
  };
  // Window w, once every thread's copies of it are in (the caller waited for its own): no
  // warpgroup reads the B window any more, then the split.
  const auto new_window = [&](int w) {
    wgmma_wait<0>();
    __syncthreads();
    split_window(w);
    fence_proxy_async();
    __syncthreads();
  };

  // Chunk c's words go to slot c % D by cp.async, issued D - 1 chunks ahead, one commit group a
  // chunk; window w's activations ride in chunk 2w - 2's group (window 0 in its own, first), so
  // waiting for chunk c's group also brings the window split at chunk c. Each thread reads back
  // only its own words: no barrier guards the slots.
  constexpr int D = weight_slots<NT>();
  const uint32_t ring = fp32_base + kRing * fp32_window_bytes<NT>();
  const auto slot = [&](int c, int j) {
    return ((c % D) * 4 + j) * kThreads * 16 + static_cast<int>(threadIdx.x) * 16;
  };
  // The issuing side: chunk c's words of the lane's rows and its slot, advanced a chunk a call
  // (issue takes c = 0, 1, 2, ... in order).
  const uint8_t* issue_words[2] = {wp[0], wp[1]};
  uint32_t issue_slot = ring + static_cast<uint32_t>(threadIdx.x) * 16;
  const uint32_t ring_end = ring + D * 4 * kThreads * 16;
  const auto issue = [&](int c) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool here = c < chunks && 8 * c + 4 * m + t < groups && present[h];
        cp_async16(issue_slot + (2 * m + h) * kThreads * 16, here ? issue_words[h] + 64 * m : wp[h],
                   here);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) issue_words[h] += 128;
    issue_slot += 4 * kThreads * 16;
    if (issue_slot >= ring_end) issue_slot -= D * 4 * kThreads * 16;
    if ((c & 1) == 0) copy_window_rows(c / 2 + 1);
    cp_async_commit();
  };
  // Chunk c's scales of the lane's groups; c = 0, 1, 2, ... in order, like issue.
  const uint8_t* scales_at[2] = {sp[0], sp[1]};
  const auto scales = [&](uint32_t(&sq)[2][2], int c) {
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool here = c < chunks && 8 * c + 4 * m + t < groups && present[h];
        sq[m][h] = here ? __ldg(scales_at[h] + 4 * m) : 0u;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) scales_at[h] += 8;
  };
  copy_window(0);
#pragma unroll
  for (int c = 0; c < D - 1; ++c) issue(c);
  uint32_t sq[2][2], nsq[2][2];
  scales(sq, 0);
  const uint8_t* ring_at = smem + (ring - base);
  for (int c = 0; c < chunks; ++c) {
    issue(c + D - 1);
    scales(nsq, c + 1);
    cp_async_wait<D - 1>();               // chunk c's group (and any older) is in
    if ((c & 1) == 0) new_window(c / 2);  // block-uniform
    uint4 wq[2][2];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        wq[m][h] = *reinterpret_cast<const uint4*>(ring_at + slot(c, 2 * m + h));
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      if (2 * c + m == subs) break;  // block-uniform: a last chunk of one sub-chunk
      run_sub(wq, sq, c, m);
    }
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) sq[m][h] = nsq[m][h];
  }
  wgmma_wait<0>();
  fence_operands(acc);
  cp_async_wait<0>();
  __syncthreads();  // shared memory is free: the warps' sums go through it

  // Each lane takes one weight row and adds each activation row's pieces (hi + mid) + lo.
  constexpr int kPitch = 8 * NT + 1;
  float* sums = reinterpret_cast<float*>(smem) + (threadIdx.x >> 5) * 16 * kPitch;
#pragma unroll
  for (int i = 0; i < 4 * NT; ++i)
    sums[(g + 8 * ((i >> 1) & 1)) * kPitch + 8 * (i >> 2) + 2 * t + (i & 1)] = acc[i];
  __syncwarp();
  const int row = blockIdx.x * kBlockRows + wg * 64 + warp * 16 + lane;
  if (lane < 16 && row < rows) {
    const float* mine = sums + lane * kPitch;
    for (int r = 0; r < n; ++r)
      task.y[static_cast<int64_t>(r) * rows + row] =
          __fadd_rn(__fadd_rn(mine[r], mine[n + r]), mine[2 * n + r]);
  }
#else
  (void)task, (void)rows, (void)cols;
  __trap();  // launched only where mxfp4_wgmma_available(): an sm_90a pass compiled this
#endif
}

template <int NT>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales, int rows,
                 int cols, const float* __restrict__ x, int n, float* __restrict__ y) {
  wgmma_body<NT>(DeviceMxfp4Task{packed, scales, x, y, n}, rows, cols);
}

template <int NT>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_grouped_kernel(const DeviceMxfp4Task* __restrict__ tasks, int rows, int cols) {
  const DeviceMxfp4Task task = tasks[blockIdx.y];
  if (task.n <= 0) return;
  wgmma_body<NT>(task, rows, cols);
}

__global__ void sm90a_pass(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

namespace detail {

bool mxfp4_wgmma_available() {
  static const bool available = [] {
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        major != 9)
      return false;
    int* flag = nullptr;
    int host = 0;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) return false;
    sm90a_pass<<<1, 1>>>(flag);
    const bool ok = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(flag);
    return ok && host == 1;
  }();
  return available;
}

void launch_mxfp4_wgmma(int64_t n, int rows, int cols, int count, cudaStream_t stream,
                        const DeviceMxfp4Task* tasks, const DeviceMxfp4& w, const float* x,
                        float* y) {
  if (!mxfp4_wgmma_available())
    throw std::runtime_error(
        "cuda: the wgmma MXFP4 kernel needs an sm_90 GPU and a build with sm_90a code");
  with_constant<1, 2, 3, 4, 6>(column_tiles(static_cast<int>(n)), [&](auto tiles) {
    constexpr int NT = decltype(tiles)::value;
    const dim3 grid((rows + kBlockRows - 1) / kBlockRows, count > 0 ? count : 1);
    if (count > 0)
      launch_threads<wgmma_grouped_kernel<NT>>(kThreads, smem_bytes<NT>(), grid, stream, tasks,
                                               rows, cols);
    else
      launch_threads<wgmma_kernel<NT>>(kThreads, smem_bytes<NT>(), grid, stream, w.packed, w.scales,
                                       rows, cols, x, static_cast<int>(n), y);
  });
}

}  // namespace detail
}  // namespace deltafin::cuda
