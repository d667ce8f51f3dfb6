#pragma once
// An M tile's Q by TMA (cp.async.bulk.tensor) instead of 16-byte cp.async per producer thread:
// one thread issues one copy per 64-column block, where the cp.async path costs every producer
// thread 16 copies, a row address (a division by the group) and an arrival per tile. Without
// any Q copies short rows ran 6-19% faster (bench/NOTES.md, session 29).
//
// The map views q as 4-D: head_dim elements; query heads; query tokens; batch rows. A packed
// M tile (scheduler.cuh: row r = token (first + r) / group, head head0 + (first + r) % group,
// with first a multiple of 128) is then one box of 64 columns x group heads x 128 / group
// tokens per column block, which lands in shared memory row by row (token-major, head-minor:
// the packed order) in the 128-byte swizzle of smem_layout.h. Rows past the tile's count get
// the next tokens' queries (finite, never stored) or, past the map, zeros.
//
// Applies where the group divides 128 and q's strides are whole 16-byte units; otherwise (or
// with FLASHPAGE_PREFILL_Q_TMA=0) box_tokens stays 0 and Q goes by cp.async.
#include <cuda.h>

#include "cuda/prefill_tc/prefill_tc.h"

namespace flashpage::cuda::prefill_hopper {

struct QTma {
  CUtensorMap map;      // dims {head_dim, query heads, tokens, batch rows}
  int box_tokens = 0;   // query tokens per box (128 / group); 0: Q by cp.async
  int batch_coord = 0;  // 1: the 4th coordinate is the batch row (uniform q); 0: always 0
};

QTma make_q_tma(const PrefillTcParams& p, int l2_promotion_bytes = 256);

}  // namespace flashpage::cuda::prefill_hopper
