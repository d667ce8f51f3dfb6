#include "cuda/prefill_hopper/kv_tma.h"

#include <cstdint>
#include <numeric>

#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/tensor_map.h"

namespace flashpage::cuda::prefill_hopper {

namespace {

constexpr int kMinBoxRows = 16;
constexpr int kElemBytes = 2;
constexpr int kBoxCols = kSwizzleRowBytes / kElemBytes;  // 64 elements: one swizzle row
constexpr int64_t kMaxStrideBytes = int64_t(1) << 40;   // cuTensorMapEncodeTiled's limit
constexpr int64_t kMaxDim = int64_t(1) << 32;

// One of K or V: base, strides (elements), storage span (elements). False: no map.
bool make_map(KvTmaMap& m, const void* base, int64_t stride_unit, int64_t stride_token,
              int64_t stride_head, int64_t span, const PrefillTcParams& p, int box_rows,
              int l2_promotion_bytes) {
  if (base == nullptr || span <= 0 || stride_token <= 0 || stride_unit < 0) return false;
  if (stride_unit % stride_token != 0) return false;
  m.unit_tokens = stride_unit / stride_token;
  const int64_t tokens = (span + stride_token - 1) / stride_token;
  const int64_t heads = p.num_kv_heads;
  // One head: its stride is never applied, any legal value does.
  if (heads == 1) stride_head = stride_token;
  if (stride_head <= 0 || tokens >= kMaxDim) return false;
  if (stride_token * kElemBytes >= kMaxStrideBytes || stride_head * kElemBytes >= kMaxStrideBytes)
    return false;
  const bool heads_first = stride_head < stride_token;
  m.token_dim = heads_first ? 2 : 1;
  const uint64_t dims[3] = {uint64_t(p.head_dim), uint64_t(heads_first ? heads : tokens),
                            uint64_t(heads_first ? tokens : heads)};
  const uint64_t strides[2] = {
      uint64_t((heads_first ? stride_head : stride_token) * kElemBytes),
      uint64_t((heads_first ? stride_token : stride_head) * kElemBytes)};
  const uint32_t box[3] = {uint32_t(kBoxCols), heads_first ? 1u : uint32_t(box_rows),
                           heads_first ? uint32_t(box_rows) : 1u};
  return encode_tensor_map_16bit_swizzle128(m.map, base, dims, strides, box, l2_promotion_bytes);
}

}  // namespace

KvTma make_kv_tma(const PrefillTcParams& p, int l2_promotion_bytes) {
  KvTma t;
  const int slice_rows = kv_slice_rows(p.head_dim);
  const bool paged = p.page_indices != nullptr;
  const int box_rows = paged ? std::gcd(p.page_size, slice_rows) : slice_rows;
  if (box_rows < kMinBoxRows) return t;
  if (!make_map(t.k, p.k, p.k_stride_unit, p.k_stride_token, p.k_stride_head, p.k_span, p,
                box_rows, l2_promotion_bytes) ||
      !make_map(t.v, p.v, p.v_stride_unit, p.v_stride_token, p.v_stride_head, p.v_span, p,
                box_rows, l2_promotion_bytes))
    return t;
  t.box_rows = box_rows;
  return t;
}

}  // namespace flashpage::cuda::prefill_hopper
