// The benchmark's switches between bit-identical variants of the gemv.cu kernels, so one run can
// time them side by side. Not thread-safe; the model never calls them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deltafin::cuda::detail {

// A shape of the BF16 kernel: weight rows a warp (2 or 4), warps a block (4 or 8: the rows that
// share a staged activation tile), 8-value chunks a lane takes per tile (1: 256-column tiles, 2:
// 512) and the activation tiles' cp.async ring (buffers; 0: staged through registers). Every
// shape computes the same bits.
struct Bf16Shape {
  int rows_per_warp = 0, warps = 0, chunks = 0, stages = 0;
  int weight_ring = 0;  // 1: the weight tiles travel in the ring too ("+w"), not in registers
};

// Forces the shape the BF16 kernels use for passes of n activation rows (1, 2, 4, 8 or 16, the
// compiled batch sizes; a pass of 5-8 rows runs as 8); a shape of 0 rows a warp restores
// gemv.cu's choice. Throws std::invalid_argument for a shape not compiled for n.
void set_bf16_shape(int n, Bf16Shape shape);
// The shapes compiled for passes of n rows, gemv.cu's default where it has no rule first.
std::vector<Bf16Shape> bf16_shapes(int n);
// "R/W/U/S" (+"+w" with the weights in the ring): rows a warp, warps, chunks, ring buffers (the
// bench's rows, the tests' messages).
std::string bf16_shape_name(const Bf16Shape& shape);

// What gemv.cu's choice at 8 activation rows weighs: the device's SMs, whether its DRAM feeds an
// SM past gemv::kFastDramGbpsPerSm (an H200), and how many blocks of each candidate an SM holds:
// 4/8/1/3+w, 4/8/1/4+w, 4/8/2/3, 3/8/2/3 and 3/4/2/3+w.
struct Bf16Occupancy8 {
  int sms = 0;
  bool fast = false;
  int ring3 = 0, ring4 = 0, two_chunks = 0, three_rows = 0, twelve_rows = 0;
};
// The shape gemv.cu runs for a pass of 5-8 rows over `count` matrices of rows[0..count) rows in
// one launch (siblings, or one matrix; no shape forced): a function of the occupancy alone, so the
// host test holds its picks on K3's launches for an H100 and an H200 without a GPU.
Bf16Shape bf16_pick_8(const int64_t* rows, int count, const Bf16Occupancy8& occupancy);
// Rows a block of a BF16 launch takes (at most the shape's warps times rows a warp) when balanced,
// on a card past kFastDramGbpsPerSm at 8 rows: of the multiples of rows_per_warp from `full` down
// to 3/4 of it, the one whose evenly spread blocks leave the busiest of `sms` SMs the fewest rows
// (the largest on a tie). 7168 rows in 32-row blocks put 64 rows on 92 SMs and 32 on 40; in 28-row
// blocks 56 on 124. Every choice gives the same bits.
int bf16_block_rows(const int64_t* rows, int count, int rows_per_warp, int full, int sms);
// Whether BF16 launches balance their blocks' rows by bf16_block_rows (off: every block takes a
// full block's rows). Off by default until an H200 has timed it; the bench turns it on under
// DELTAFIN_BENCH_BF16_BALANCED=1.
void set_bf16_balanced(bool on);
// Forces the rows a BF16 block takes at every batch size (capped at a full block); 0 restores the
// launchers' choice. Throws std::invalid_argument below 0. For the tests.
void set_bf16_block_rows(int block_rows);

// The shape gemv.cu runs for a pass of 9-16 rows over `count` matrices of rows[0..count) rows of
// `cols` on a GPU of `sms` SMs (no shape forced).
Bf16Shape bf16_pick_16(const int64_t* rows, int count, int64_t cols, int sms);

}  // namespace deltafin::cuda::detail
