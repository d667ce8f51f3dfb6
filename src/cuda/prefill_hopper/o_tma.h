#pragma once
// Experiment (FLASHPAGE_PREFILL_O_TMA=1, a compile definition: bench/experiments.sh "otma"):
// the epilogue stores each warp's 16 staged O rows with one TMA store per 64-column block
// instead of 16-byte stores by every thread, which had to wait for their shared-memory
// read-backs (session 25: staging O without storing it ran 7% faster at 32/8/128 64 x 512).
//
// The map views out as 4-D: head_dim elements; query heads; tokens; batch rows (as the Q of
// an M tile is laid out: scheduler.cuh's packed rows, token-major, head-minor). A warp's 16
// rows are one box of 64 columns x group heads x 16 / group tokens per column block, read
// from the Q stage where the epilogue staged them in smem_layout.h's swizzled layout. Only
// warps whose 16 rows are all the tile's (inside one segment) store this way; the others,
// and groups that do not divide 16, keep the thread stores; so does head_dim 256 (its own
// staging path, epilogue.cuh). The extent is known for batch_prefill_ragged's calls
// (num_qo_tokens) and uniform ones (qo_len x batch rows); paged calls with ragged queries do
// not set num_qo_tokens, so they keep the thread stores (box_tokens 0).
#include <cuda.h>

#include <cstdint>

#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/prefill_tc/prefill_tc.h"
#include "cuda/tensor_map.h"

namespace flashpage::cuda::prefill_hopper {

constexpr int kOTmaWarpRows = 16;  // the rows one math warp stages (epilogue.cuh)

struct OTma {
  CUtensorMap map;      // dims {head_dim, query heads, tokens, batch rows}
  int box_tokens = 0;   // tokens per box (16 / group); 0: O by thread stores
  int batch_coord = 0;  // 1: the 4th coordinate is the batch row (uniform out); 0: always 0
};

inline OTma make_o_tma(const PrefillTcParams& p) {
  OTma o;
  constexpr int64_t kElemBytes = 2;
  constexpr int64_t kMaxDim = int64_t(1) << 31;  // int32 coordinates
  if (p.out == nullptr || p.head_dim == 256 || p.num_kv_heads <= 0 ||
      p.num_qo_heads % p.num_kv_heads != 0)
    return o;
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  if (kOTmaWarpRows % group != 0) return o;
  const bool ragged = p.qo_indptr != nullptr;
  const int64_t tokens = ragged ? p.num_qo_tokens : int64_t(p.qo_len);
  const int64_t rows = ragged ? 1 : int64_t(p.batch_size);
  if (tokens <= 0 || tokens >= kMaxDim || rows <= 0 || rows >= kMaxDim) return o;
  // One head or one row: that stride is never applied, any legal value does.
  const int64_t stride_head = p.num_qo_heads == 1 ? p.out_stride_token : p.out_stride_head;
  const int64_t stride_batch = rows == 1 ? p.out_stride_token : p.out_stride_batch;
  // The driver refuses strides that are no multiple of 16 bytes or reach 2^40 (tensor_map.h:
  // encode then returns false); only signs are checked here.
  for (int64_t s : {stride_head, p.out_stride_token, stride_batch})
    if (s <= 0) return o;
  const uint64_t dims[4] = {uint64_t(p.head_dim), uint64_t(p.num_qo_heads), uint64_t(tokens),
                            uint64_t(rows)};
  const uint64_t strides[3] = {uint64_t(stride_head * kElemBytes),
                               uint64_t(p.out_stride_token * kElemBytes),
                               uint64_t(stride_batch * kElemBytes)};
  const uint32_t box[4] = {uint32_t(kSwizzleRowBytes / kElemBytes), uint32_t(group),
                           uint32_t(kOTmaWarpRows / group), 1u};
  if (!encode_tensor_map_16bit_swizzle128(o.map, p.out, dims, strides, box)) return o;
  o.box_tokens = int(kOTmaWarpRows / group);
  o.batch_coord = ragged ? 0 : 1;
  return o;
}

}  // namespace flashpage::cuda::prefill_hopper
