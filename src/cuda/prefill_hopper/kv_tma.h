#pragma once
// K/V tiles by TMA (cp.async.bulk.tensor) instead of per-thread cp.async: the load warpgroup
// then issues a handful of instructions per tile instead of 16-byte copies per thread (its
// instruction stream competes with the math warpgroups' softmax for the schedulers; without
// any K/V copies the kernel ran ~10% faster, bench/NOTES.md).
//
// Per warp slice (the 32 rows, 16 at head_dim 256, each producer warp copies of a K/V tile):
// when every row of the slice is a key some query row sees (no zero-fill needed) and its
// token coordinate fits the map, the slice is loaded as boxes of `box_rows` token rows x 64
// elements, one per 128-byte column block, straight into the tile's swizzled layout (the TMA
// 128-byte swizzle is smem_layout.h's layout); otherwise by cp.async as before. The slices
// that straddle the end of a row's keys are a K/V tile's last, partial one: at most one per
// M tile.
//
// The map views K (or V) as 3-D: head_dim elements; KV heads; token rows, where a token's
// coordinate is unit * unit_tokens + slot (the page id or batch row, and the slot in it:
// prefill_tc.h's addressing) whenever the unit stride is a whole number of token strides,
// which holds for NHD and HND pages, ragged [N, H, D] and [B, H, L, D] K/V. Paged K/V use
// boxes of gcd(page_size, slice rows) >= 16 rows (a box never crosses a page); smaller pages
// stay on cp.async.
#include <cuda.h>

#include <cstdint>

#include "cuda/prefill_tc/prefill_tc.h"

namespace flashpage::cuda::prefill_hopper {

struct KvTmaMap {
  CUtensorMap map;          // dims {head_dim, ., .}: heads and tokens, smaller stride first
  int64_t unit_tokens = 0;  // token coordinate = unit * unit_tokens + slot
  int token_dim = 2;        // the map dimension (1 or 2) that is the token row
};

struct KvTma {
  KvTmaMap k, v;
  int box_rows = 0;  // token rows per box; 0: no TMA (every slice by cp.async)
};

// The maps for this call's K and V, or box_rows = 0 where TMA does not apply (strides that
// are no whole number of tokens, pages under 16 tokens, unknown extents, a driver without
// tensor maps). The boxes cover a producer warp's slice (smem_layout.h, kv_slice_rows).
// l2_promotion_bytes: tensor_map.h.
KvTma make_kv_tma(const PrefillTcParams& p, int l2_promotion_bytes = 256);

}  // namespace flashpage::cuda::prefill_hopper
