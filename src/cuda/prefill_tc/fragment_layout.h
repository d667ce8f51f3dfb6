#pragma once
// Pure index math of the shared-memory tiles and the m16n8k16 fragments, callable on host
// and device so a host test can check it against the PTX fragment definitions.
//
// Tiles are rows of head_dim 16-bit elements split into 16-byte chunks; chunk c of row r is
// stored at chunk position c ^ (r % 8). The 8 rows an ldmatrix phase reads all sit at
// different chunk positions, so the 8 x 16 bytes cover all 32 banks once (no conflicts),
// and a row's cp.async writes stay within the row.
#include <cstdint>

#if defined(__CUDACC__)
#define FP_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FP_HOST_DEVICE inline
#endif

namespace flashpage::cuda::prefill_tc {

FP_HOST_DEVICE constexpr uint32_t swizzled_offset(int row, int chunk, int row_bytes) {
  return uint32_t(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

// ldmatrix.x4 address of `lane`: lanes 8i..8i+7 give the 8 row addresses of matrix i.
struct LdmatrixRow {
  int row, chunk;
};

// A operand (16 rows x 16 k) of rows [row0, row0+16), k step kk: matrices are
// (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
FP_HOST_DEVICE constexpr LdmatrixRow a_operand_row(int lane, int row0, int kk) {
  const int i = lane >> 3;
  return {row0 + (i & 1) * 8 + (lane & 7), kk * 2 + (i >> 1)};
}
// B operand from a [key][dim] tile (K for Q.K^T), keys [n0, n0+16), k step kk: matrices are
// (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 0-7), (keys 8-15, k 8-15), giving
// {b0, b1} of key tile n0/8 and then of key tile n0/8 + 1.
FP_HOST_DEVICE constexpr LdmatrixRow b_operand_row(int lane, int n0, int kk) {
  const int i = lane >> 3;
  return {n0 + (i >> 1) * 8 + (lane & 7), kk * 2 + (i & 1)};
}
// B operand from a [k][n] tile read transposed (V for P.V: k = key, n = dim), keys
// [k0, k0+16), dims [dim0, dim0+16): matrices (keys 0-7, dims 0-7), (keys 8-15, dims 0-7),
// (keys 0-7, dims 8-15), (keys 8-15, dims 8-15) -> {b0, b1} of dim tile dim0/8, then dim0/8+1.
FP_HOST_DEVICE constexpr LdmatrixRow b_trans_operand_row(int lane, int k0, int dim0) {
  const int i = lane >> 3;
  return {k0 + (i & 1) * 8 + (lane & 7), dim0 / 8 + (i >> 1)};
}

// The ldmatrix operands above all read, for a pair index x (k step or dim pair), chunk
// 2x + c of a row r with r % 8 == lane % 8. Since the swizzle only touches the low three
// chunk bits, chunk position = 8 * (x / 4) + ((2 * (x % 4) + c) ^ (lane % 8)): four
// per-lane offsets (x % 4) plus compile-time immediates, instead of one register per
// (x, row block) address.
struct SwizzledPairs {
  uint32_t low[4];  // byte offset of (lane row, x % 4) in a tile whose first row is 0

  FP_HOST_DEVICE void init(int lane_row, int c, int row_bytes) {
    for (int x = 0; x < 4; ++x) low[x] = swizzled_offset(lane_row, 2 * x + c, row_bytes);
  }
  // Offset of pair x, `row_add` rows further down (row_add % 8 == 0).
  FP_HOST_DEVICE uint32_t at(int x, int row_add, int row_bytes) const {
    constexpr int kSwizzleSpanBytes = 8 * 16;  // the 8 chunks one XOR pattern permutes
    return low[x & 3] + uint32_t((x >> 2) * kSwizzleSpanBytes + row_add * row_bytes);
  }
};

// Accumulator element e (0..3) of an m16n8 C fragment held by `lane`.
FP_HOST_DEVICE constexpr int acc_row(int lane, int e) { return (lane >> 2) + (e >> 1) * 8; }
FP_HOST_DEVICE constexpr int acc_col(int lane, int e) { return (lane & 3) * 2 + (e & 1); }

}  // namespace flashpage::cuda::prefill_tc
