// Host side of the tensor-core prefill: the coverage check and the dispatch to the
// (dtype, head_dim) instances, with the launch arguments derived once.
#include "cuda/prefill_tc/prefill_tc.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/prefill_tc/launch.h"
#include "cuda/prefill_tc/problem_view.cuh"
#include "cuda/prefill_tc/tile_config.h"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda {

namespace {

constexpr int kElemsPer16Bytes = 8;  // 16-bit elements per cp.async / vector store
constexpr int64_t kMaxGrid = 0x7fffffff;  // gridDim.x limit; blocks loop over the rest

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
bool vector_stride(int64_t s) { return s % kElemsPer16Bytes == 0; }

bool covered_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

bool covered_mask_dtype(DType t) {
  return t == DType::boolean || t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

template <class T>
void dispatch_head_dim(const prefill_tc::KernelArgs& args, int64_t grid, cudaStream_t stream) {
  switch (args.p.head_dim) {
    case 64: prefill_tc::launch<T, 64>(args, grid, stream); break;
    case 128: prefill_tc::launch<T, 128>(args, grid, stream); break;
    default: prefill_tc::launch<T, 256>(args, grid, stream); break;
  }
}

}  // namespace

bool prefill_operands_covered(const PrefillTcParams& p) {
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return false;
  if (!covered_head_dim(p.head_dim)) return false;
  if (p.num_kv_heads <= 0 || p.num_qo_heads <= 0 || p.num_qo_heads % p.num_kv_heads != 0)
    return false;
  if (p.batch_size < 0 || !(p.scale > 0.0f)) return false;
  if (!aligned16(p.q) || !aligned16(p.out) || !aligned16(p.k) || !aligned16(p.v)) return false;
  for (int64_t s : {p.q_stride_batch, p.q_stride_token, p.q_stride_head, p.out_stride_batch,
                    p.out_stride_token, p.out_stride_head, p.k_stride_unit, p.k_stride_token,
                    p.k_stride_head, p.v_stride_unit, p.v_stride_token, p.v_stride_head})
    if (!vector_stride(s)) return false;
  const bool paged = p.page_indices != nullptr;
  // Any page size: tokens are addressed one by one through the page table.
  if (paged && (p.page_indptr == nullptr || p.last_page_len == nullptr || p.page_size < 1))
    return false;
  if (p.work_ints != nullptr && p.work_tile_tokens < 1) return false;
  return true;
}

bool prefill_tc_covers(const PrefillTcParams& p) {
  if (!prefill_operands_covered(p)) return false;
  if (p.mask != nullptr && !covered_mask_dtype(p.mask_dtype)) return false;
  if (p.work_ints == nullptr && p.max_qo_len < 0) return false;  // its grid needs the bound
  return true;
}

bool run_prefill_tc(const PrefillTcParams& p, cudaStream_t stream) {
  if (!prefill_tc_covers(p)) return false;

  prefill_tc::KernelArgs a;
  a.p = p;
  a.paged = p.page_indices != nullptr;
  a.has_mask = p.mask != nullptr;
  a.causal = p.causal && !a.has_mask;  // a mask replaces causal
  a.has_cap = p.logits_soft_cap > 0.0f;
  a.scale_log2 = p.scale * kLog2e;
  a.cap_scale = a.has_cap ? p.scale / p.logits_soft_cap : 0.0f;
  a.page_div = FastDivisor(uint32_t(a.paged ? p.page_size : 1));
  a.group = p.num_qo_heads / p.num_kv_heads;

  constexpr int kBlockM = prefill_tc::kWarpRows * 4;
  static_assert(kBlockM == prefill_tc::TileConfig<128>::kBlockM);
  int64_t tiles = 0, tile_tokens = 0;
  if (p.work_ints != nullptr) {
    tiles = p.num_work_host;
    tile_tokens = p.work_tile_tokens;
  } else {
    tile_tokens = prefill_tc::kDefaultTileTokens;
    a.tiles_per_row = int((int64_t(p.max_qo_len) + tile_tokens - 1) / tile_tokens);
    tiles = int64_t(p.batch_size) * a.tiles_per_row;
  }
  a.subtiles = int((tile_tokens * a.group + kBlockM - 1) / kBlockM);
  const int64_t grid = std::min<int64_t>(tiles * p.num_kv_heads * a.subtiles, kMaxGrid);
  if (grid <= 0) return true;  // no query rows: nothing to write

  if (p.dtype == DType::bf16)
    dispatch_head_dim<__nv_bfloat16>(a, grid, stream);
  else
    dispatch_head_dim<__half>(a, grid, stream);
  return true;
}

}  // namespace flashpage::cuda
