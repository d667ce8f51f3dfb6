#pragma once
// Where a block's work lives: the launch arguments, the query tile a virtual block works on
// (from the plan's work list or from its own tiling), the geometry of a batch row, and the
// packed (token, head) rows of one M tile.
#include <cstdint>

#include "cuda/fast_divisor.cuh"
#include "cuda/prefill_tc/prefill_tc.h"
#include "cuda/prefill_tc/tile_config.h"
#include "ops/workspace.h"

namespace flashpage::cuda::prefill_tc {

// PrefillTcParams plus what the host derives once per launch.
struct KernelArgs {
  PrefillTcParams p;
  FastDivisor page_div;
  float scale_log2 = 0.0f;  // scale * log2(e): raw dot products -> log2-domain logits
  float cap_scale = 0.0f;   // scale / cap: the tanh argument of the soft cap
  int group = 1;            // query heads per KV head
  int subtiles = 1;         // M tiles per query tile
  int tiles_per_row = 0;    // without a work list: query tiles per batch row
  bool paged = false, has_mask = false, has_cap = false, causal = false;
};

struct QueryTile {
  int row = 0, q_begin = 0, q_end = 0;
};

// Virtual blocks: (query tile, KV head, M subtile), subtile fastest so that the blocks reading
// the same K/V run next to each other.
__device__ __forceinline__ int64_t num_virtual_blocks(const KernelArgs& a) {
  const int64_t tiles = a.p.work_ints != nullptr ? int64_t(a.p.work_ints[0])
                                                 : int64_t(a.p.batch_size) * a.tiles_per_row;
  return tiles * a.p.num_kv_heads * a.subtiles;
}

// Row geometry of batch row b.
struct RowGeometry {
  int qo_start = 0;                // global index of the row's first query token (ragged) or 0
  int qo_len = 0;                  // S
  int kv_len = 0;                  // L
  int kv_base = 0;                 // contiguous KV: global index of the row's first key
  int offset = 0;                  // query i sits at key position i + offset
  const int32_t* pages = nullptr;  // paged: the row's page ids
};

__device__ __forceinline__ RowGeometry row_geometry(const KernelArgs& a, int b) {
  const PrefillTcParams& p = a.p;
  RowGeometry g;
  if (p.qo_indptr != nullptr) {
    g.qo_start = p.qo_indptr[b];
    g.qo_len = p.qo_indptr[b + 1] - g.qo_start;
  } else {
    g.qo_len = p.qo_len;
  }
  if (a.paged) {
    const int first = p.page_indptr[b];
    const int pages = p.page_indptr[b + 1] - first;
    g.kv_len = pages <= 0 ? 0 : p.page_size * (pages - 1) + p.last_page_len[b];
    g.pages = p.page_indices + first;
  } else if (p.kv_indptr != nullptr) {
    g.kv_base = p.kv_indptr[b];
    g.kv_len = p.kv_indptr[b + 1] - g.kv_base;
  } else {
    g.kv_len = p.kv_len;
  }
  g.offset = p.bottom_right ? g.kv_len - g.qo_len : 0;
  return g;
}

// Query tile `w`: item w of the work list, or tile w % tiles_per_row of row w / tiles_per_row.
// q_end is clamped to the row, so a stale or generous bound never reads past it.
__device__ __forceinline__ QueryTile query_tile(const KernelArgs& a, int w, int qo_len) {
  QueryTile t;
  if (a.p.work_ints != nullptr) {
    const int32_t* item =
        a.p.work_ints + Workspace::Impl::kHeaderInts + int64_t(w) * Workspace::Impl::kWorkFields;
    t.row = item[0];
    t.q_begin = item[1];
    t.q_end = item[2] < qo_len ? item[2] : qo_len;
  } else {
    t.row = w / a.tiles_per_row;
    t.q_begin = (w % a.tiles_per_row) * kDefaultTileTokens;
    t.q_end = min(t.q_begin + kDefaultTileTokens, qo_len);
  }
  return t;
}
__device__ __forceinline__ int query_tile_row(const KernelArgs& a, int w) {
  return a.p.work_ints != nullptr ? a.p.work_ints[Workspace::Impl::kHeaderInts +
                                                  int64_t(w) * Workspace::Impl::kWorkFields]
                                  : w / a.tiles_per_row;
}

// The rows of one M tile: packed row r (0 <= r < count) is tile token (first + r) / group
// and query head head0 + (first + r) % group.
struct PackedRows {
  int first = 0, count = 0, group = 1;
  int q_begin = 0;  // row-local index of the tile's first query token
  int head0 = 0;    // first query head of the KV head's group

  // Row-local query index i and query head of packed row r.
  __device__ __forceinline__ void locate(int r, int& i, int& head) const {
    const int packed = first + r;
    const int token = packed / group;
    i = q_begin + token;
    head = head0 + (packed - token * group);
  }
  // Key positions of the tile's first and last query tokens.
  __device__ __forceinline__ int first_token() const { return q_begin + first / group; }
  __device__ __forceinline__ int last_token() const {
    return q_begin + (first + count - 1) / group;
  }
};

// Element offset of query/output token i (row-local) of row b, head h.
__device__ __forceinline__ int64_t token_offset(int b, int qo_start, int i, int h,
                                                int64_t stride_batch, int64_t stride_token,
                                                int64_t stride_head) {
  return int64_t(b) * stride_batch + int64_t(qo_start + i) * stride_token +
         int64_t(h) * stride_head;
}

}  // namespace flashpage::cuda::prefill_tc
