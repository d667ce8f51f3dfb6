#pragma once
// Which keys a query row sees and how raw dot products become log2-domain logits:
//   s = scale * q.k;  soft cap: s = cap * tanh(s / cap);  additive mask: s += m;
//   key outside [lo, hi) or bool mask false: s = -inf;  then s *= log2(e).
// [lo, hi) per row: hi = causal ? clamp(p + 1, 0, L) : L, lo = window >= 0 ?
// clamp(p - window_left, 0, L) : 0, with p the query's key position (i + offset).
//
// Per M tile the policy also gives the key range any row sees (tiles outside it are never
// loaded) and the range every row sees fully: K/V tiles inside it skip all per-element work
// (the "interior" fast path: logits stay raw, the scale is folded into the exp2 FMA).
#include <cstdint>

#include "cuda/device_types.cuh"
#include "cuda/prefill_tc/fragment_layout.h"
#include "cuda/prefill_tc/problem_view.cuh"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda::prefill_tc {

struct KeyRange {
  int lo = 0, hi = 0;
};

__device__ __forceinline__ int clamp_int(int x, int lo, int hi) { return min(max(x, lo), hi); }

__device__ __forceinline__ KeyRange visible_keys(const KernelArgs& a, int pos, int kv_len) {
  KeyRange r;
  r.hi = a.causal ? clamp_int(pos + 1, 0, kv_len) : kv_len;
  r.lo = a.p.window_left >= 0 ? clamp_int(pos - a.p.window_left, 0, kv_len) : 0;
  return r;
}

// Key ranges of an M tile: `any` = union over its rows (what to load), `all` = keys every
// row sees (what needs no per-element test).
struct TileKeyRanges {
  KeyRange any, all;
};
__device__ __forceinline__ TileKeyRanges tile_key_ranges(const KernelArgs& a,
                                                         const RowGeometry& g,
                                                         const PackedRows& rows) {
  // lo and hi grow with the position, so the first and the last token bound them.
  const KeyRange first = visible_keys(a, rows.first_token() + g.offset, g.kv_len);
  const KeyRange last = visible_keys(a, rows.last_token() + g.offset, g.kv_len);
  TileKeyRanges t;
  t.any = {first.lo, last.hi};
  t.all = {last.lo, first.hi};
  return t;
}

// Accurate tanh from one exp2: absolute error ~1e-7, so cap * tanh stays within ~1e-5 of
// the logit even for caps of 50 (tanh.approx would be ~1e-3 * cap).
__device__ __forceinline__ float soft_cap_tanh(float x) {
  constexpr float kTwoLog2e = 2.0f * kLog2e;
  return 1.0f - __fdividef(2.0f, exp2f(x * kTwoLog2e) + 1.0f);
}

__device__ __forceinline__ float load_mask_value(const void* base, DType type, int64_t i) {
  switch (type) {
    case DType::boolean: return static_cast<const uint8_t*>(base)[i] != 0 ? 0.0f : kNegInf;
    case DType::f16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// The policy for the two rows (lane/4 and lane/4 + 8 of the warp) this thread holds.
struct RowPolicy {
  KeyRange keys[2];
  int64_t mask_row[2];  // element offset of the row's mask (key 0)

  __device__ __forceinline__ void init(const KernelArgs& a, const RowGeometry& g,
                                       const PackedRows& rows, int b, int r0) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      int i, head;
      rows.locate(r0 + 8 * k, i, head);
      // A padded row (past the tile's rows) sees nothing: no mask read past the tensor.
      keys[k] = r0 + 8 * k < rows.count ? visible_keys(a, i + g.offset, g.kv_len) : KeyRange{};
      mask_row[k] = int64_t(b) * a.p.mask_strides[0] + int64_t(head) * a.p.mask_strides[1] +
                    int64_t(i) * a.p.mask_strides[2];
    }
  }

  // Raw dot products of keys [key0, key0 + 8 * kKeyTiles) -> log2-domain logits times
  // 1 / (the returned multiplier), with every transform and mask applied. Without a soft cap
  // or an explicit mask only the keys a row does not see change (to -inf) and the scale goes
  // into the softmax's exp2 FMA, as on interior tiles: the general loop below branches per
  // logit on the cap and the mask, which made causal diagonal tiles of the Hopper kernel's
  // copy of it ~17 instructions per logit (bench/NOTES.md, session 14).
  template <int kKeyTiles>
  __device__ __forceinline__ float transform(float (&s)[kKeyTiles][4], const KernelArgs& a,
                                             int key0, int lane) const {
    if (!a.has_cap && !a.has_mask) {
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + nt * 8 + acc_col(lane, e);
          const KeyRange r = keys[e >> 1];
          if (!(key >= r.lo && key < r.hi)) s[nt][e] = kNegInf;
        }
      return a.scale_log2;
    }
    const float scale = a.p.scale;
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = e >> 1;
        const int key = key0 + nt * 8 + acc_col(lane, e);
        float x = s[nt][e] * scale;
        if (a.has_cap) x = a.p.logits_soft_cap * soft_cap_tanh(s[nt][e] * a.cap_scale);
        if (a.has_mask && key < keys[k].hi)
          x += load_mask_value(a.p.mask, a.p.mask_dtype,
                               mask_row[k] + int64_t(key) * a.p.mask_strides[3]);
        const bool visible = key >= keys[k].lo && key < keys[k].hi;
        s[nt][e] = visible ? x * kLog2e : kNegInf;
      }
    }
    return 1.0f;
  }
};

}  // namespace flashpage::cuda::prefill_tc
