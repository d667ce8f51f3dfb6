#pragma once
// Tensor-core prefill (mma.sync m16n8k16, FlashAttention-2 style) for f16/bf16 and head_dim
// 64/128/256. A plain record of pointers, strides (in elements) and sizes describes one
// launch; run_prefill_tc launches it or returns false when the configuration is not covered,
// so the caller can fall back to the generic kernel.
//
// Addressing (every stride in elements; the last dim of q/out/k/v is contiguous):
//   query/out element (b, i, h, :)   qo_start(b) = qo_indptr ? qo_indptr[b] : 0
//     q + b*q_stride_batch + (qo_start(b) + i)*q_stride_token + h*q_stride_head
//   lse (b, i, h): lse + b*lse_stride_batch + (qo_start(b)+i)*lse_stride_token + h*lse_stride_head
//   key/value token t of row b, KV head h:
//     paged:       unit = page id of t, slot = t % page_size
//     contiguous:  unit = b,            slot = (kv_indptr ? kv_indptr[b] : 0) + t
//     k + unit*k_stride_unit + slot*k_stride_token + h*k_stride_head   (v likewise)
//   mask (b, h, i, j): mask + b*s[0] + h*s[1] + i*s[2] + j*s[3] (0 for broadcast dims)
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashpage/dtype.h"

namespace flashpage::cuda {

struct PrefillTcParams {
  DType dtype = DType::bf16;  // of q, k, v and out: f16 or bf16
  int head_dim = 0;           // 64, 128 or 256
  int batch_size = 0;
  int num_qo_heads = 0, num_kv_heads = 0;  // Hq % Hkv == 0; query head h reads KV head h / (Hq/Hkv)

  // Queries and output: uniform [B, Hq, S, D] (qo_indptr null, qo_len = S) or ragged [N, Hq, D]
  // (qo_indptr device int32 [B+1]).
  const void* q = nullptr;
  int64_t q_stride_batch = 0, q_stride_token = 0, q_stride_head = 0;
  void* out = nullptr;
  int64_t out_stride_batch = 0, out_stride_token = 0, out_stride_head = 0;
  const int32_t* qo_indptr = nullptr;
  int qo_len = 0;
  float* lse = nullptr;  // optional, f32 natural log; -inf for a row that sees no key
  int64_t lse_stride_batch = 0, lse_stride_token = 0, lse_stride_head = 0;

  // Keys and values (same dtype as q). Paged when page_indices != nullptr.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride_unit = 0, k_stride_token = 0, k_stride_head = 0;
  int64_t v_stride_unit = 0, v_stride_token = 0, v_stride_head = 0;
  const int32_t* page_indptr = nullptr;    // [B+1]
  const int32_t* page_indices = nullptr;   // physical page ids
  const int32_t* last_page_len = nullptr;  // [B]
  int page_size = 0;                       // >= 1 (any: tokens are looked up one by one)
  const int32_t* kv_indptr = nullptr;      // contiguous ragged: [B+1]; null: every row has kv_len
  int kv_len = 0;                          // contiguous uniform length (kv_indptr null)
  // Elements from k (v) to one past its last element, i.e. the storage the strides above
  // may address; 0: unknown. The Hopper kernel's TMA maps are sized from it, so it must not
  // be smaller than that storage (TMA would read keys past it as zeros).
  int64_t k_span = 0, v_span = 0;

  // Variant.
  float scale = 0.0f;             // > 0 (already resolved)
  float logits_soft_cap = 0.0f;   // > 0: s = cap * tanh(s / cap) on the scaled logit
  int window_left = -1;           // >= 0: position p sees keys j >= p - window_left
  bool causal = false;            // ignored (off) when a mask is given
  bool bottom_right = true;       // p = i + L - S (paged/ragged); false: p = i (sdpa, top-left)
  const void* mask = nullptr;     // bool (uint8, keep nonzero) or additive f32/f16/bf16
  DType mask_dtype = DType::boolean;
  int64_t mask_strides[4] = {0, 0, 0, 0};  // over [b, h, i, j]

  // Scheduling. With a work list (the device int region of a prefill plan: [0] = num_work,
  // items {row, q_begin, q_end, -1} from int offset 4), blocks walk its items; num_work_host
  // (Plan::num_work) and work_tile_tokens (Plan::kv_chunk, the planned tile) size the grid.
  // Without one, the kernel tiles every row itself in tiles of 64 query tokens, up to
  // max_qo_len per row (exact for uniform queries; for ragged ones any upper bound works,
  // tiles past a row's end exit at once).
  const int32_t* work_ints = nullptr;
  int num_work_host = 0;
  int work_tile_tokens = 64;
  int max_qo_len = 0;
  // Ragged queries only: max_qo_len < 0 means the host does not know the longest row. The
  // Hopper kernel then reads qo_indptr itself (no device-to-host read, no host
  // synchronisation, CUDA-graph capturable); prefill_tc does not cover it. num_qo_tokens
  // (the rows' total, Nq) then bounds the Hopper grid.
  int64_t num_qo_tokens = 0;
  int64_t kv_tokens = 0;  // K/V tokens the call reads over all rows (0: unknown); the Hopper
                          // kernel orders its tiles in bands of KV heads whose K/V fit in L2
};

// Launches the kernel on `stream`; false when not covered (nothing launched). Throws
// flashpage::Error on a CUDA launch failure. Covered: f16/bf16, head_dim 64/128/256, any
// page size, Hq % Hkv == 0 (any group size), scale > 0, 16-byte aligned q/k/v/out base
// pointers, q/out/k/v batch/unit/token/head strides multiple of 8 elements (pass 0 for a
// dim that is not used), mask dtype boolean/f32/f16/bf16 with any strides.
bool run_prefill_tc(const PrefillTcParams& params, cudaStream_t stream);
// The same coverage decision, without launching.
bool prefill_tc_covers(const PrefillTcParams& params);
// The operands both tensor-core prefills (this one and the Hopper kernel) take: the list above
// but for masks and the bound on the rows, plus a complete page table where paged and a work
// list's tile size where planned. Each kernel adds its own conditions.
bool prefill_operands_covered(const PrefillTcParams& params);

}  // namespace flashpage::cuda
