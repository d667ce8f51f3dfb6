#pragma once
// The simple, correct attention kernel for every case the tensor-core kernels do not cover:
// one warp per (query token, query head) streaming over its keys with online softmax; f32,
// f16, bf16; any head dim that is a multiple of 8 up to 256; paged or strided K/V; masks,
// causal (either alignment), window, soft cap, LSE. A faster kernel replaces it per case by
// being chosen first in the host dispatch (prefill.cu, decode.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/page_table_view.cuh"
#include "flashpage/dtype.h"

namespace flashpage::cuda {

constexpr int kGenericMaxHeadDim = 256;

enum class MaskKind : uint8_t { none, boolean, additive };

// Where query token i of row b lives: base + b*stride_batch + (row_start(b) + i)*stride_token
// + h*stride_head. Ragged rows set indptr (then stride_batch is 0); uniform rows have
// uniform_len queries each. The same addressing serves out and lse.
struct TokenAddressing {
  const int32_t* indptr = nullptr;
  int32_t uniform_len = 0;
  int32_t batch_size = 0;
};
struct StridedRef {
  void* ptr = nullptr;
  int64_t stride_batch = 0, stride_token = 0, stride_head = 0;
};

// A mask broadcast to [B, H, S, L] through strides (0 on broadcast dims).
struct MaskView {
  const void* ptr = nullptr;
  DType dtype = DType::boolean;
  MaskKind kind = MaskKind::none;
  int64_t stride_batch = 0, stride_head = 0, stride_query = 0, stride_key = 0;
};

// Strided K/V: sdpa's [B, Hkv, L, D] (uniform_len L) or ragged [Nkv, Hkv, D] with indptr.
struct StridedKv {
  StridedRef k, v;
  TokenAddressing rows;
};

struct GenericArgs {
  DType dtype = DType::f32;  // q, k, v and out
  StridedRef q, out;
  float* lse = nullptr;
  int64_t lse_stride_batch = 0, lse_stride_token = 0, lse_stride_head = 0;
  TokenAddressing queries;
  MaskView mask;
  bool causal = false;
  // Query i of a row with S queries and L keys sits at position i + L - S (bottom-right,
  // FlashInfer's paged/ragged convention) or at i (top-left, PyTorch SDPA). Causal and the
  // window are measured from that position.
  bool bottom_right = true;
  int32_t window_left = -1;
  float scale = 1.0f;
  float logits_soft_cap = 0.0f;
  int32_t num_qo_heads = 0, group_size = 1, head_dim = 0;
  int64_t num_tokens = 0;                // token-driven launches: total query tokens
  const int32_t* work_ints = nullptr;    // plan-driven launches: the workspace's work list
};

// Plan-driven: blocks walk the prefill plan's (row, q_begin, q_end) items. grid.x = plan.grid.
void launch_generic_paged_planned(const GenericArgs& args, const PageTableView& pages,
                                  const void* k_pages, const void* v_pages, int64_t grid_x,
                                  cudaStream_t stream);
// Token-driven: one warp per (query token, head), rows found from args.queries.
void launch_generic_paged(const GenericArgs& args, const PageTableView& pages,
                          const void* k_pages, const void* v_pages, cudaStream_t stream);
void launch_generic_strided(const GenericArgs& args, const StridedKv& kv, cudaStream_t stream);

}  // namespace flashpage::cuda
