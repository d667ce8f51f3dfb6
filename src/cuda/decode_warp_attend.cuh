#pragma once
// The per-warp math of both tensor-core decode kernels (decode_kernel.cuh, the sm_80+ split
// kernel, and decode_stream_kernel.cuh, the sm_90 streamed one), on 16 K/V tokens in shared
// memory, laid out as one of the two layouts below:
//   S[16 query heads x 16 tokens] = Q.K^T   (m16n8k16 MMAs, f32)
//   online softmax per head row (log2 domain, exp2f)
//   O[16 heads x D] += P.V                  (P rounded to T, f32 accumulators)
// Each thread holds rows (lane / 4) and (lane / 4 + 8) of the state, fragment-distributed.
#include <cstdint>

#include "cuda/decode_args.h"
#include "cuda/ptx.cuh"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda {

// Where this lane's ldmatrix rows sit. K: tokens (lane & 7) + 8 * (lane >> 4), 16-byte chunk
// 2 * ks + ((lane >> 3) & 1) of the head's row; V (transposed loads): tokens (lane & 7) +
// 8 * ((lane >> 3) & 1), chunk 2 * nd + (lane >> 4).

// One row per token, `row_bytes` apart (padded by 16 B: 8 rows hit 32 banks).
struct PaddedKvRows {
  uint32_t k_lane, v_lane;
  __device__ __forceinline__ PaddedKvRows(uint32_t k_base, uint32_t v_base, int row_bytes,
                                          int lane)
      : k_lane(k_base + uint32_t(((lane & 7) + (lane >> 4) * 8) * row_bytes + ((lane >> 3) & 1) * 16)),
        v_lane(v_base + uint32_t(((lane & 7) + ((lane >> 3) & 1) * 8) * row_bytes + (lane >> 4) * 16)) {}
  __device__ __forceinline__ uint32_t k(int ks) const { return k_lane + uint32_t(ks * 32); }
  __device__ __forceinline__ uint32_t v(int nd) const { return v_lane + uint32_t(nd * 32); }
};

// TMA boxes of kBoxTokens (8 or 1) tokens in the 128-byte swizzle (decode_tiling.h):
// [box][head][64-element column block][kBoxTokens rows of 128 B], boxes `box_stride` apart.
// The hardware swizzles by absolute address: 16-byte chunk j of a row sits at chunk
// j ^ (row address bits 7-9).
template <int kHeadDim, int kBoxTokens>
struct SwizzledKvRows {
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kRowBytes = 128;
  uint32_t k_row, v_row;    // this lane's row at column block 0
  uint32_t k_half, v_half;  // this lane's chunk within a K step's pair (0 or 1)

  // Offset of token t's row of column block c at KV head h from the first box.
  static __device__ __forceinline__ uint32_t row_offset(int t, int h, int c, int box_stride) {
    return uint32_t((t / kBoxTokens) * box_stride +
                    ((h * kColBlocks + c) * kBoxTokens + t % kBoxTokens) * kRowBytes);
  }
  __device__ __forceinline__ SwizzledKvRows(uint32_t k_base, uint32_t v_base, int box_stride,
                                            int head_local, int lane)
      : k_row(k_base + row_offset((lane & 7) + (lane >> 4) * 8, head_local, 0, box_stride)),
        v_row(v_base + row_offset((lane & 7) + ((lane >> 3) & 1) * 8, head_local, 0, box_stride)),
        k_half(uint32_t((lane >> 3) & 1)),
        v_half(uint32_t(lane >> 4)) {}
  // Where 16-byte chunk j of the row at shared address `row` sits in the swizzle.
  static __device__ __forceinline__ uint32_t chunk(uint32_t row, uint32_t j) {
    return row + ((j ^ ((row >> 7) & 7u)) << 4);
  }
  // Chunk 2 * step + half of the row at column block step / 4.
  static __device__ __forceinline__ uint32_t at(uint32_t row0, uint32_t half, int step) {
    const uint32_t row = row0 + uint32_t((step >> 2) * kBoxTokens * kRowBytes);
    return chunk(row, uint32_t(2 * step & 7) | half);
  }
  __device__ __forceinline__ uint32_t k(int ks) const { return at(k_row, k_half, ks); }
  __device__ __forceinline__ uint32_t v(int nd) const { return at(v_row, v_half, nd); }
};

template <class T, int kHeadDim>
struct DecodeWarpState {
  static constexpr int kKSteps = kHeadDim / 16;   // MMA K steps of Q.K^T
  static constexpr int kDimTiles = kHeadDim / 8;  // MMA N tiles of O
  static constexpr int kVecBytes = 16;

  float m[2], d[2];
  float o[kDimTiles][4];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      m[i] = kNegInf;
      d[i] = 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  }

  // Scaled, capped, masked logit in the log2 domain (keys outside [lo, hi) masked).
  static __device__ __forceinline__ float logit(const DecodeArgs& a, float s, int token, int lo,
                                                int hi) {
    float x;
    if (a.logits_soft_cap > 0.0f) {
      x = a.logits_soft_cap * tanhf(s * a.scale / a.logits_soft_cap) * kLog2e;
    } else {
      x = s * (a.scale * kLog2e);
    }
    return token >= lo && token < hi ? x : kNegInf;
  }

  // Folds tokens first .. first + 15 (those outside [lo, hi) masked) into the state. kv: the
  // layout (above) at this warp's head and tokens; q_fragment(ks, qa) yields the 16x16 A
  // fragment of Q for K step ks (from registers or by ldmatrix).
  template <class QFragment, class KvLayout>
  __device__ __forceinline__ void attend16(const DecodeArgs& a, QFragment&& q_fragment,
                                           const KvLayout& kv, int lo, int first, int hi,
                                           int lane) {
    // S = Q.K^T: two N tiles of 8 tokens.
    float s[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      uint32_t qa[4], kb[4];
      q_fragment(ks, qa);
      ptx::ldmatrix_x4(kb, kv.k(ks));
      ptx::mma_16816<T>(s[0], qa, kb[0], kb[1]);
      ptx::mma_16816<T>(s[1], qa, kb[2], kb[3]);
    }
    // Element e of N tile n: row (lane/4 + 8*(e/2)), token first + 8n + 2*(lane%4) + e%2.
    float tile_max[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = logit(a, s[n][e], first + 8 * n + 2 * (lane & 3) + (e & 1), lo, hi);
        tile_max[e >> 1] = fmaxf(tile_max[e >> 1], s[n][e]);
      }
    float alpha[2], sub[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      // The four lanes of a quad hold one row's 16 tokens.
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(m[i], tile_max[i]);
      alpha[i] = softmax_rescale(m[i], m_new);
      sub[i] = softmax_safe_max(m_new);
      m[i] = m_new;
      d[i] *= alpha[i];
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - sub[e >> 1]);
        d[e >> 1] += s[n][e];
      }
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e >> 1];
    // P as the A operand: the S accumulators of two N tiles are exactly a 16x16 A fragment.
    const uint32_t pa[4] = {ptx::pack2<T>(s[0][0], s[0][1]), ptx::pack2<T>(s[0][2], s[0][3]),
                            ptx::pack2<T>(s[1][0], s[1][1]), ptx::pack2<T>(s[1][2], s[1][3])};
    // O += P.V (transposed loads of V).
#pragma unroll
    for (int nd = 0; nd < kDimTiles / 2; ++nd) {
      uint32_t vb[4];
      ptx::ldmatrix_x4_trans(vb, kv.v(nd));
      ptx::mma_16816<T>(o[2 * nd], pa, vb[0], vb[1]);
      ptx::mma_16816<T>(o[2 * nd + 1], pa, vb[2], vb[3]);
    }
  }

  // Sums each row's denominator over its quad (call once, before reading the state out).
  __device__ __forceinline__ void reduce_denominators() {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      d[i] += __shfl_xor_sync(0xffffffffu, d[i], 1);
      d[i] += __shfl_xor_sync(0xffffffffu, d[i], 2);
    }
  }
};

}  // namespace flashpage::cuda
