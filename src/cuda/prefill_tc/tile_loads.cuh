#pragma once
// Global -> shared copies of the Q tile and the K/V tiles: 16-byte cp.async chunks into the
// swizzled layout of fragment_layout.h, rows that do not exist zero-filled (so padded keys
// hold V = 0, never stale NaN, and padded query rows give finite logits).
//
// K/V tiles are loaded token by token: each thread owns one 16-byte chunk column and
// kKvPasses tokens of a tile; a token's page (paged KV) is looked up one tile ahead
// (prefetch_units) so the page-table load latency hides behind a tile of MMAs.
#include <cstdint>

#include "cuda/prefill_tc/fragment_layout.h"
#include "cuda/prefill_tc/problem_view.cuh"
#include "cuda/ptx.cuh"

namespace flashpage::cuda::prefill_tc {

template <class T, class Cfg>
__device__ __forceinline__ void load_q_tile(uint8_t* q_smem, const KernelArgs& a,
                                            const RowGeometry& g, const PackedRows& rows, int b) {
  const T* q = static_cast<const T*>(a.p.q);
  const int chunk = int(threadIdx.x) % Cfg::kChunksPerRow;
  const int row0 = int(threadIdx.x) / Cfg::kChunksPerRow;
  const uint32_t base = ptx::smem_addr(q_smem);
#pragma unroll
  for (int pass = 0; pass < Cfg::kQPasses; ++pass) {
    const int r = row0 + pass * Cfg::kRowsPerPass;
    const bool valid = r < rows.count;
    const T* src = q;
    if (valid) {
      int i, head;
      rows.locate(r, i, head);
      src = q +
            token_offset(b, g.qo_start, i, head, a.p.q_stride_batch, a.p.q_stride_token,
                         a.p.q_stride_head) +
            chunk * (kChunkBytes / Cfg::kElemBytes);
    }
    ptx::cp_async_16(base + swizzled_offset(r, chunk, Cfg::kRowBytes), src, valid);
  }
}

template <class T, class Cfg>
struct KvTileLoader {
  const T* k;
  const T* v;
  int64_t k_head, v_head;  // this thread's KV head + chunk column, in elements
  int64_t k_stride_unit, k_stride_token, v_stride_unit, v_stride_token;
  const int32_t* pages;  // paged: the row's page ids
  FastDivisor page_div;
  int contiguous_unit;  // contiguous: the unit (batch row) of every token
  int slot_base;        // contiguous: slot of key 0 (ragged kv_indptr[b])
  int kv_end;           // keys at or past it are zero-filled
  int row0, chunk;
  bool paged;
  int32_t units[Cfg::kKvPasses];  // per pass: page id / unit of the next tile to issue, -1: none

  __device__ __forceinline__ KvTileLoader(const KernelArgs& a, const RowGeometry& g, int b,
                                          int kv_head, int kv_end_) {
    k = static_cast<const T*>(a.p.k);
    v = static_cast<const T*>(a.p.v);
    chunk = int(threadIdx.x) % Cfg::kChunksPerRow;
    row0 = int(threadIdx.x) / Cfg::kChunksPerRow;
    const int elem = chunk * (kChunkBytes / Cfg::kElemBytes);
    k_head = int64_t(kv_head) * a.p.k_stride_head + elem;
    v_head = int64_t(kv_head) * a.p.v_stride_head + elem;
    k_stride_unit = a.p.k_stride_unit;
    k_stride_token = a.p.k_stride_token;
    v_stride_unit = a.p.v_stride_unit;
    v_stride_token = a.p.v_stride_token;
    pages = g.pages;
    page_div = a.page_div;
    contiguous_unit = b;
    slot_base = g.kv_base;
    kv_end = kv_end_;
    paged = a.paged;
  }

  // Looks up the units of the tile starting at key `start` (plain loads; consumed by the
  // next issue()).
  __device__ __forceinline__ void prefetch_units(int start) {
#pragma unroll
    for (int pass = 0; pass < Cfg::kKvPasses; ++pass) {
      const int key = start + row0 + pass * Cfg::kRowsPerPass;
      int32_t unit = -1;
      if (key < kv_end) unit = paged ? pages[page_div.div(uint32_t(key))] : contiguous_unit;
      units[pass] = unit;
    }
  }

  // Copies the tile starting at key `start` (whose units were prefetched) into `stage`.
  __device__ __forceinline__ void issue(uint8_t* stage, int start) const {
    const uint32_t k_dst = ptx::smem_addr(stage);
    const uint32_t v_dst = k_dst + Cfg::kKvTileBytes;
#pragma unroll
    for (int pass = 0; pass < Cfg::kKvPasses; ++pass) {
      const int r = row0 + pass * Cfg::kRowsPerPass;
      const int key = start + r;
      const bool valid = units[pass] >= 0;
      const T* k_src = k;
      const T* v_src = v;
      if (valid) {
        const int slot =
            paged ? key - int(page_div.div(uint32_t(key)) * page_div.divisor) : slot_base + key;
        k_src =
            k + (int64_t(units[pass]) * k_stride_unit + int64_t(slot) * k_stride_token + k_head);
        v_src =
            v + (int64_t(units[pass]) * v_stride_unit + int64_t(slot) * v_stride_token + v_head);
      }
      const uint32_t off = swizzled_offset(r, chunk, Cfg::kRowBytes);
      ptx::cp_async_16(k_dst + off, k_src, valid);
      ptx::cp_async_16(v_dst + off, v_src, valid);
    }
  }
};

}  // namespace flashpage::cuda::prefill_tc
