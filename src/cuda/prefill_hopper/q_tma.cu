#include "cuda/prefill_hopper/q_tma.h"

#include <cstdint>

#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/tensor_map.h"

namespace flashpage::cuda::prefill_hopper {

QTma make_q_tma(const PrefillTcParams& p, int l2_promotion_bytes) {
  QTma t;
  constexpr int64_t kElemBytes = 2;
  constexpr int64_t kMaxStrideBytes = int64_t(1) << 40;  // cuTensorMapEncodeTiled's limits
  constexpr int64_t kMaxDim = int64_t(1) << 31;          // and int32 coordinates
  if (p.q == nullptr || p.num_kv_heads <= 0 || p.num_qo_heads % p.num_kv_heads != 0) return t;
  const int64_t group = p.num_qo_heads / p.num_kv_heads;
  if (kMTileRows % group != 0) return t;
  const bool ragged = p.qo_indptr != nullptr;
  // Token extent: a ragged q's whole storage ([N, Hq, D]: N tokens), or a uniform row's S.
  const int64_t tokens =
      ragged ? (p.q_stride_token > 0 ? (p.q_span + p.q_stride_token - 1) / p.q_stride_token : 0)
             : int64_t(p.qo_len);
  const int64_t rows = ragged ? 1 : int64_t(p.batch_size);
  if (tokens <= 0 || tokens >= kMaxDim || rows <= 0 || rows >= kMaxDim) return t;
  // One head or one row: that stride is never applied, any legal value does.
  const int64_t stride_head = p.num_qo_heads == 1 ? p.q_stride_token : p.q_stride_head;
  const int64_t stride_batch = rows == 1 ? p.q_stride_token : p.q_stride_batch;
  for (int64_t s : {stride_head, p.q_stride_token, stride_batch})
    if (s <= 0 || (s * kElemBytes) % 16 != 0 || s * kElemBytes >= kMaxStrideBytes) return t;
  const uint64_t dims[4] = {uint64_t(p.head_dim), uint64_t(p.num_qo_heads), uint64_t(tokens),
                            uint64_t(rows)};
  const uint64_t strides[3] = {uint64_t(stride_head * kElemBytes),
                               uint64_t(p.q_stride_token * kElemBytes),
                               uint64_t(stride_batch * kElemBytes)};
  const uint32_t box[4] = {uint32_t(kSwizzleRowBytes / kElemBytes), uint32_t(group),
                           uint32_t(kMTileRows / group), 1u};
  if (!encode_tensor_map_16bit_swizzle128(t.map, p.q, dims, strides, box, l2_promotion_bytes))
    return t;
  t.box_tokens = int(kMTileRows / group);
  t.batch_coord = ragged ? 0 : 1;
  return t;
}

}  // namespace flashpage::cuda::prefill_hopper
