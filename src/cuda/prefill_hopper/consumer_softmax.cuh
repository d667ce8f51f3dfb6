#pragma once
// Logits and online softmax on a consumer thread's S accumulators (wgmma m64nNk16 f32 layout,
// wgmma_ops.cuh: per warp the stacked m16n8 C layout, so each thread holds two rows, lane/4
// and lane/4 + 8 of its warp's 16, spread over the 4 lanes of a quad).
//
// Interior tiles (every row of the warpgroup sees every key of the tile, no soft cap) keep raw
// dot products: the scale is folded into the exp2 FMA. Boundary tiles (causal diagonal,
// window edge, row end, padded rows) and soft-capped ones go through mask_logits first.
//
// Unlike prefill_tc's WarpSoftmax, update() does not rescale O itself: O's registers may still
// be in use by the asynchronous P V wgmma when the new maximum is known, so the factor is
// returned and applied after wgmma_wait (consumer_mainloop.cuh).
#include "cuda/exp2_poly.h"
#include "cuda/prefill_hopper/scheduler.cuh"
#include "cuda/prefill_tc/logits_policy.cuh"
#include "cuda/prefill_tc/online_softmax.cuh"
#include "cuda/softmax_state.cuh"

#ifndef FLASHPAGE_PREFILL_RESCALE
// O's rescale after each K/V tile. 2 (the default): a row's max is held until a tile exceeds
// it by more than kHeldMaxSlack, and a warp whose rows all kept theirs skips the multiplies
// (FlashAttention-4's lazy rescale; +5% at head_dim 256, +2% at 128, level at 64: bench/NOTES.md,
// session 30). The other levels are compile experiments (bench/experiments.sh): 1 skips only
// where no row moved its max (exact maxima), 0 rescales at every tile (before session 30).
#define FLASHPAGE_PREFILL_RESCALE 2
#endif

#ifndef FLASHPAGE_PREFILL_EXP_POLY
// Of a 128-key S tile's 16 column blocks (8 keys each), how many take their exponentials from
// the FMA-pipe polynomial (exp2_poly.h) instead of MUFU, at head_dim 64 only. 0 (the default):
// none. A compile experiment (bench/experiments.sh, poly*; bench/NOTES.md, session 32): at
// head_dim 64 MUFU needs as many cycles per S tile as the tensor cores (16 exponentials per
// clock and SM against the two GEMMs' 4096 FLOP per clock). Measured 1-7% slower on an H100:
// head_dim 64 waits on latency, not on MUFU's rate.
#define FLASHPAGE_PREFILL_EXP_POLY 0
#endif

namespace flashpage::cuda::prefill_hopper {

using prefill_tc::KeyRange;

// Level 2: how far (log2 units) a tile's max may exceed the held one before it is taken. The
// probabilities then stay <= 2^8 = 256: the same relative precision in bf16/f16 P, far from
// overflow in P (f16: 65504) and in the f32 sums; m + log2(d) is unchanged.
constexpr float kHeldMaxSlack = 8.0f;

// The keys each of the thread's two rows sees (empty for rows past the tile).
struct RowKeys {
  KeyRange keys[2];

  __device__ __forceinline__ void init(const prefill_tc::KernelArgs& k, const RowGeometry& g,
                                       const PackedRows& rows, int r0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      keys[h] = KeyRange{};
      if (r < rows.count) {
        int i, head;
        rows.locate(r, i, head);
        keys[h] = prefill_tc::visible_keys(k, i + g.offset, g.kv_len);
      }
    }
  }
};

// Keys [key0, key0 + 8 * kKeyTiles) outside each row's visible range -> -inf; returns the
// multiplier the softmax applies (see RowSoftmax::update). Without a soft cap the raw dot
// products stay and the scale is folded into the exp2 FMA, as on interior tiles, so a
// boundary tile costs two compares and a select per element. The soft cap's tanh is a loop
// of its own: as
// a branch per element it made every diagonal tile's code ~17 instructions per element and
// its fetch missed the instruction cache (ncu, bench/NOTES.md session 14).
template <int kKeyTiles>
__device__ __forceinline__ float mask_logits(float (&s)[kKeyTiles][4],
                                             const prefill_tc::KernelArgs& k, const RowKeys& rk,
                                             int key0, int lane) {
  // Key of element (nt, e) = col0 + 8 * nt + (e & 1); the range tests against constants.
  const int col0 = key0 + 2 * (lane & 3);
  int lo[2], hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lo[h] = rk.keys[h].lo - col0;
    hi[h] = rk.keys[h].hi - col0;
  }
  if (!k.has_cap) {
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = nt * 8 + (e & 1);
        if (!(j >= lo[e >> 1] && j < hi[e >> 1])) s[nt][e] = kNegInf;
      }
    return k.scale_log2;
  }
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = nt * 8 + (e & 1);
      const float x = k.p.logits_soft_cap * prefill_tc::soft_cap_tanh(s[nt][e] * k.cap_scale);
      s[nt][e] = j >= lo[e >> 1] && j < hi[e >> 1] ? x * kLog2e : kNegInf;
    }
  return 1.0f;
}

// A thread's 2 * kKeyTiles values of row half h folded with op into kChains interleaved
// accumulators, then those pairwise: a dependency chain of kKeyTiles / 4 + 2 instead of
// kKeyTiles at 128-key tiles, since the softmax's latency sits on the ping-pong's critical
// path (ncu: the row max and sum were ~16% of the stall samples, bench/NOTES.md session 10).
// 64-key tiles (head_dim 256, whose O takes 128 registers) keep one chain: more live values
// spilled there.
template <int kKeyTiles, class Op>
__device__ __forceinline__ float reduce_row_half(const float (&s)[kKeyTiles][4], int h, Op op) {
  constexpr int kChains = kKeyTiles >= 16 ? 4 : 1;
  static_assert(kKeyTiles % kChains == 0);
  float acc[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc[c] = op(s[c][2 * h], s[c][2 * h + 1]);
#pragma unroll
  for (int nt = kChains; nt < kKeyTiles; ++nt)
    acc[nt % kChains] = op(acc[nt % kChains], op(s[nt][2 * h], s[nt][2 * h + 1]));
#pragma unroll
  for (int width = kChains / 2; width >= 1; width /= 2)
#pragma unroll
    for (int c = 0; c < width; ++c) acc[c] = op(acc[c], acc[c + width]);
  return acc[0];
}

// kPolyTiles of the kKeyTiles column blocks, spread evenly, compute exp2 by the polynomial
// of degree kPolyDegree (FLASHPAGE_PREFILL_EXP_POLY); the rest by MUFU.
template <int kKeyTiles, int kPolyTiles = 0, int kPolyDegree = 3>
struct RowSoftmax {
  static_assert(kPolyTiles >= 0 && kPolyTiles <= kKeyTiles);
  static __device__ __forceinline__ float exp2_of_tile(int nt, float x) {
    if (kPolyTiles > 0 && (nt * kPolyTiles) % kKeyTiles < kPolyTiles)  // nt is a constant
      return exp2_poly<kPolyDegree>(x);
    return prefill_tc::fast_exp2(x);
  }

  float m[2], d[2];  // running max (log2 domain, quad-uniform); per-thread partial denominator

  __device__ __forceinline__ void init() {
    m[0] = m[1] = kNegInf;
    d[0] = d[1] = 0.0f;
  }

  // s holds logits times 1/mul in log2 units (mul > 0); on return it holds the unnormalised
  // probabilities and o_scale[h] the factor that moves row h's O to the new maximum. Rows
  // that saw nothing so far keep m = -inf, d = 0, p = 0 (softmax_state.cuh guards).
  __device__ __forceinline__ void update(float (&s)[kKeyTiles][4], float mul, float (&o_scale)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float tile_max =
          reduce_row_half(s, h, [](float x, float y) { return fmaxf(x, y); });
      const float m_seen = fmaxf(m[h], prefill_tc::quad_max(tile_max) * mul);
#if FLASHPAGE_PREFILL_RESCALE >= 2
      // m = -inf (nothing seen yet) takes any finite max: -inf + slack is -inf.
      const float m_new = m_seen > m[h] + kHeldMaxSlack ? m_seen : m[h];
#else
      const float m_new = m_seen;
#endif
#if FLASHPAGE_PREFILL_RESCALE >= 1
      o_scale[h] = m_new == m[h] ? 1.0f : softmax_rescale(m[h], m_new);
#else
      o_scale[h] = softmax_rescale(m[h], m_new);
#endif
      const float shift = -softmax_safe_max(m_new);
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        s[nt][2 * h] = exp2_of_tile(nt, fmaf(s[nt][2 * h], mul, shift));
        s[nt][2 * h + 1] = exp2_of_tile(nt, fmaf(s[nt][2 * h + 1], mul, shift));
      }
      const float sum = reduce_row_half(s, h, [](float x, float y) { return x + y; });
      d[h] = d[h] * o_scale[h] + sum;
      m[h] = m_new;
    }
  }
};

// Called by every lane of the warp (the vote below).
template <int kDimTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[kDimTiles][4], const float (&o_scale)[2]) {
#if FLASHPAGE_PREFILL_RESCALE >= 1
  if (!__any_sync(0xffffffffu, o_scale[0] != 1.0f || o_scale[1] != 1.0f)) return;
#endif
#pragma unroll
  for (int dt = 0; dt < kDimTiles; ++dt) {
    o[dt][0] *= o_scale[0];
    o[dt][1] *= o_scale[0];
    o[dt][2] *= o_scale[1];
    o[dt][3] *= o_scale[1];
  }
}

}  // namespace flashpage::cuda::prefill_hopper
