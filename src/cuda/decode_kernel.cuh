#pragma once
// Paged batch decode on tensor cores. One block = one (work item, KV head, group of <= 16
// query heads). The KV head is blockIdx.x, the fastest-varying index, so the blocks of all
// heads of one item run together and read each token's NHD row (all heads) close in time. The block streams the item's K/V tokens through a cp.async multi-stage
// shared-memory pipeline (16-byte loads, each token's address from the page table, so any page
// size costs the same), and each warp runs, per 16 tokens of a tile:
//   S[16 heads x 16 tokens] = Q . K^T   (m16n8k16 MMAs, f32)
//   online softmax per head row (log2 domain, exp2f)
//   O[16 heads x D] += P . V            (P rounded to T, f32 accumulators)
// Every K/V byte is read from HBM once per step for all heads of the group. At the end the
// warps' states are merged through shared memory and written as the final output (slot -1)
// or as an f32 partial for the split merge.
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/kernel_attributes.h"
#include "cuda/decode_args.h"
#include "cuda/decode_warp_attend.cuh"
#include "cuda/device_types.cuh"
#include "cuda/ptx.cuh"
#include "cuda/softmax_state.cuh"
#include "ops/workspace.h"

namespace flashpage::cuda {

template <class T, int kHeadDim>
struct DecodeBlock {
  using Cfg = DecodeTile<kHeadDim>;
  static constexpr int kRows = kDecodeHeadsPerBlock;
  static constexpr int kDimTiles = kHeadDim / 8;    // MMA N tiles of the output
  static constexpr int kKSteps = kHeadDim / 16;     // MMA K steps of Q.K^T
  static constexpr int kElemsPerVec = Cfg::kVecBytes / Cfg::kElemBytes;

  const DecodeArgs& a;
  uint8_t* q_smem;
  uint8_t* kv_smem;
  int lane, warp;
  // This thread's 16-byte slot in each tile: token tok0 + p * kTokensPerPass, chunk `chunk`.
  int tok0, chunk;
  int64_t head_offset;  // elements: KV head + chunk within the token row

  // Per-item state.
  int row, lo, hi;
  const int32_t* row_pages;

  // Per-thread online softmax of rows (lane / 4) and (lane / 4 + 8), fragment-distributed.
  DecodeWarpState<T, kHeadDim> st;

  __device__ __forceinline__ DecodeBlock(const DecodeArgs& args, uint8_t* smem)
      : a(args), q_smem(smem), kv_smem(smem + Cfg::kQBytes) {
    lane = int(threadIdx.x) & 31;
    warp = int(threadIdx.x) >> 5;
    tok0 = int(threadIdx.x) / Cfg::kChunksPerRow;
    chunk = int(threadIdx.x) % Cfg::kChunksPerRow;
    head_offset = int64_t(blockIdx.x) * a.pages.stride_head + chunk * kElemsPerVec;
  }

  // Page ids of this thread's tokens in tile `tile` (-1: past the item's end). Plain loads:
  // issued a tile ahead, their latency hides behind a tile of compute.
  __device__ __forceinline__ void load_page_ids(int tile, int32_t (&ids)[Cfg::kPasses]) const {
#pragma unroll
    for (int p = 0; p < Cfg::kPasses; ++p) {
      const int token = lo + tile * Cfg::kTileTokens + tok0 + p * Cfg::kTokensPerPass;
      ids[p] = token < hi ? row_pages[a.pages.page_divisor.div(uint32_t(token))] : -1;
    }
  }

  __device__ __forceinline__ void issue_tile(int tile, const int32_t (&ids)[Cfg::kPasses]) const {
    uint8_t* stage = kv_smem + (tile % Cfg::kStages) * Cfg::kStageBytes;
    const T* k = static_cast<const T*>(a.k_pages);
    const T* v = static_cast<const T*>(a.v_pages);
#pragma unroll
    for (int p = 0; p < Cfg::kPasses; ++p) {
      const int local = tok0 + p * Cfg::kTokensPerPass;
      const int token = lo + tile * Cfg::kTileTokens + local;
      const bool valid = ids[p] >= 0;
      const uint32_t in_page =
          uint32_t(token) - a.pages.page_divisor.div(uint32_t(token)) * a.pages.page_divisor.divisor;
      const int64_t src = valid ? int64_t(ids[p]) * a.pages.stride_page +
                                      int64_t(in_page) * a.pages.stride_token + head_offset
                                : 0;
      const uint32_t dst =
          ptx::smem_addr(stage + local * Cfg::kRowBytes + chunk * Cfg::kVecBytes);
      ptx::cp_async_16(dst, k + src, valid);
      ptx::cp_async_16(dst + Cfg::kTileTokens * Cfg::kRowBytes, v + src, valid);
    }
  }

  // Query rows of this block's heads into shared memory (rows past the group are zero).
  __device__ __forceinline__ void load_q(int qo_head0, int heads) const {
    const uint16_t* q = static_cast<const uint16_t*>(a.q);
    for (int e = int(threadIdx.x); e < kRows * kHeadDim; e += Cfg::kThreads) {
      const int r = e / kHeadDim, dim = e % kHeadDim;
      const uint16_t x = r < heads ? q[int64_t(row) * a.q_stride_batch +
                                        int64_t(qo_head0 + r) * a.q_stride_head + dim]
                                   : uint16_t(0);
      *reinterpret_cast<uint16_t*>(q_smem + r * Cfg::kRowBytes + dim * Cfg::kElemBytes) = x;
    }
  }

  __device__ __forceinline__ void compute_tile(int tile) {
    const int warp_token0 = lo + tile * Cfg::kTileTokens + warp * Cfg::kTokensPerWarp;
    if (warp_token0 >= hi) return;  // this warp's tokens are all past the end
    const uint8_t* stage = kv_smem + (tile % Cfg::kStages) * Cfg::kStageBytes;
    const uint8_t* k_tile = stage + warp * Cfg::kTokensPerWarp * Cfg::kRowBytes;
    const uint8_t* v_tile = k_tile + Cfg::kTileTokens * Cfg::kRowBytes;
    // Q from shared memory each K step: ldmatrix rows lane&15, chunk lane>>4.
    const uint32_t q_addr =
        ptx::smem_addr(q_smem + (lane & 15) * Cfg::kRowBytes + (lane >> 4) * Cfg::kVecBytes);
    st.attend16(
        a, [&](int ks, uint32_t(&qa)[4]) { ptx::ldmatrix_x4(qa, q_addr + ks * 2 * Cfg::kVecBytes); },
        PaddedKvRows(ptx::smem_addr(k_tile), ptx::smem_addr(v_tile), Cfg::kRowBytes, lane),
        warp_token0, warp_token0, hi, lane);
  }

  // Merges the warps' states and writes the final output or the partial of `slot`.
  __device__ __forceinline__ void epilogue(int slot, int qo_head0, int heads, float* partial_lse) {
    float* ep_o = reinterpret_cast<float*>(kv_smem);
    float* ep_m = ep_o + Cfg::kWarps * kRows * kHeadDim;
    float* ep_d = ep_m + Cfg::kWarps * kRows;
    const int g = lane >> 2, c = 2 * (lane & 3);
    st.reduce_denominators();
    float* my_o = ep_o + warp * kRows * kHeadDim;
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) {
      *reinterpret_cast<float2*>(my_o + g * kHeadDim + 8 * n + c) = make_float2(st.o[n][0], st.o[n][1]);
      *reinterpret_cast<float2*>(my_o + (g + 8) * kHeadDim + 8 * n + c) =
          make_float2(st.o[n][2], st.o[n][3]);
    }
    if ((lane & 3) == 0) {
      ep_m[warp * kRows + g] = st.m[0];
      ep_m[warp * kRows + g + 8] = st.m[1];
      ep_d[warp * kRows + g] = st.d[0];
      ep_d[warp * kRows + g + 8] = st.d[1];
    }
    __syncthreads();
    for (int e = int(threadIdx.x); e < heads * kHeadDim; e += Cfg::kThreads) {
      const int r = e / kHeadDim, dim = e % kHeadDim;
      SoftmaxState<1> st;
      st.init();
#pragma unroll
      for (int w = 0; w < Cfg::kWarps; ++w) {
        const float ow[1] = {ep_o[(w * kRows + r) * kHeadDim + dim]};
        st.merge(ep_m[w * kRows + r], ep_d[w * kRows + r], ow);
      }
      const int head = qo_head0 + r;
      if (slot < 0) {
        T* out = static_cast<T*>(a.out);
        out[int64_t(row) * a.out_stride_batch + int64_t(head) * a.out_stride_head + dim] =
            from_float<T>(st.normalized(0));
        if (a.lse != nullptr && dim == 0)
          a.lse[int64_t(row) * a.lse_stride_batch + int64_t(head) * a.lse_stride_head] = st.lse();
      } else {
        const int64_t at = int64_t(slot) * a.num_qo_heads + head;
        a.partial_out[at * kHeadDim + dim] = st.normalized(0);
        if (dim == 0) partial_lse[at] = st.lse();
      }
    }
    __syncthreads();  // the next item's prologue overwrites this memory
  }

  __device__ __forceinline__ void run() {
    const int32_t* ints = a.work_ints;
    const int num_work = ints[0];
    const int num_partials = ints[1];
    float* partial_lse = a.partial_out + int64_t(num_partials) * a.num_qo_heads * kHeadDim;
    const int4* items = reinterpret_cast<const int4*>(ints + Workspace::Impl::kHeaderInts);
    const int head_lo = int(blockIdx.z) * kRows;
    const int heads = min(kRows, a.group_size - head_lo);
    const int qo_head0 = int(blockIdx.x) * a.group_size + head_lo;

    for (int w = int(blockIdx.y); w < num_work; w += int(gridDim.y)) {
      const int4 item = items[w];  // {row, kv_begin, kv_end, slot}
      row = item.x;
      const int length = a.pages.length(row);
      lo = item.y;
      // Tokens before the window are skipped, not loaded.
      if (a.window_left >= 0) lo = max(lo, length - 1 - a.window_left);
      hi = item.z;
      row_pages = a.pages.indices + a.pages.indptr[row];
      const int num_tiles = hi > lo ? (hi - lo + Cfg::kTileTokens - 1) / Cfg::kTileTokens : 0;

      {  // Prologue: the page ids of the first stages at once, then their loads.
        int32_t ids[Cfg::kStages - 1][Cfg::kPasses];
#pragma unroll
        for (int s = 0; s < Cfg::kStages - 1; ++s) load_page_ids(s, ids[s]);
#pragma unroll
        for (int s = 0; s < Cfg::kStages - 1; ++s) {
          if (s < num_tiles) issue_tile(s, ids[s]);
          ptx::cp_async_commit();
        }
      }
      int32_t ids[Cfg::kPasses];
      load_page_ids(Cfg::kStages - 1, ids);
      load_q(qo_head0, heads);  // after the K/V loads are in flight
      st.init();

      for (int t = 0; t < num_tiles; ++t) {
        ptx::cp_async_wait<Cfg::kStages - 2>();
        __syncthreads();  // tile t landed for all threads; tile t-1's stage is free
        if (t + Cfg::kStages - 1 < num_tiles) issue_tile(t + Cfg::kStages - 1, ids);
        ptx::cp_async_commit();
        if (t + Cfg::kStages < num_tiles) load_page_ids(t + Cfg::kStages, ids);
        compute_tile(t);
      }
      ptx::cp_async_wait<0>();
      __syncthreads();
      epilogue(item.w, qo_head0, heads, partial_lse);
    }
  }
};

template <class T, int kHeadDim>
__global__ void __launch_bounds__(DecodeTile<kHeadDim>::kThreads)
    paged_decode_kernel(const __grid_constant__ DecodeArgs args) {
  extern __shared__ __align__(16) uint8_t smem[];
  DecodeBlock<T, kHeadDim> block(args, smem);
  block.run();
}

template <class T, int kHeadDim>
void launch_paged_decode(const DecodeArgs& args, dim3 grid, cudaStream_t stream) {
  using Cfg = DecodeTile<kHeadDim>;
  constexpr auto kernel = &paged_decode_kernel<T, kHeadDim>;
  allow_shared_memory<kernel>(Cfg::kSmemBytes);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda
