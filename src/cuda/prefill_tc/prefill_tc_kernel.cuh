#pragma once
// The tensor-core prefill block (mainloop) and its thin __global__ wrapper.
//
// A block of 4 warps takes virtual blocks (query tile, KV head, M subtile) in a grid-stride
// loop. Per M tile of 64 packed (token, head) rows:
//   1. cp.async the Q tile; cp.async the first K/V tiles of the keys any row sees;
//   2. per K/V tile (double-buffered: the next tile's copy runs under this tile's MMAs):
//      S = Q.K^T on tensor cores; interior tiles go straight to the softmax with the scale
//      folded into the exp2, boundary tiles (causal diagonal, window edge, row end), soft-cap
//      and mask tiles through the logits policy; online softmax; O += P.V with P from
//      registers;
//   3. epilogue: O / d through shared memory to 16-byte stores, LSE.
// Only the mainloop touches the MMA/ldmatrix/cp.async steps, so a wgmma/TMA mainloop can
// replace run_m_tile's loop with the same policy, softmax and epilogue pieces.
#include <cstdint>

#include "cuda/prefill_tc/epilogue.cuh"
#include "cuda/prefill_tc/logits_policy.cuh"
#include "cuda/prefill_tc/mma_fragments.cuh"
#include "cuda/prefill_tc/online_softmax.cuh"
#include "cuda/prefill_tc/problem_view.cuh"
#include "cuda/prefill_tc/tile_config.h"
#include "cuda/prefill_tc/tile_loads.cuh"
#include "cuda/ptx.cuh"

namespace flashpage::cuda::prefill_tc {

template <class T, int kHeadDim>
struct PrefillTcBlock {
  using Cfg = TileConfig<kHeadDim>;
  using Softmax = WarpSoftmax<Cfg::kKeyTiles, Cfg::kDimTiles>;
  static constexpr int kBlockN = Cfg::kBlockN;
  static constexpr int kStages = Cfg::kStages;

  static __device__ __forceinline__ uint8_t* stage(uint8_t* kv_smem, int tile) {
    return kv_smem + (tile % kStages) * Cfg::kStageBytes;
  }

  static __device__ __forceinline__ void run_m_tile(const KernelArgs& a, uint8_t* smem, int b,
                                                    const RowGeometry& g, const PackedRows& rows,
                                                    int kv_head) {
    const int lane = int(threadIdx.x) & 31;
    const int warp_row0 = (int(threadIdx.x) >> 5) * kWarpRows;
    uint8_t* q_smem = smem;
    uint8_t* kv_smem = smem + Cfg::kQBytes;
    const uint32_t q_rows = ptx::smem_addr(q_smem) + warp_row0 * Cfg::kRowBytes;
    FragmentOffsets<Cfg> frag;
    frag.init(lane);

    // Keys outside `any` are never loaded: the causal/window skip.
    const TileKeyRanges ranges = tile_key_ranges(a, g, rows);
    const int kv_begin = ranges.any.lo;
    const int num_tiles =
        ranges.any.hi > kv_begin ? (ranges.any.hi - kv_begin + kBlockN - 1) / kBlockN : 0;

    KvTileLoader<T, Cfg> loader(a, g, b, kv_head, ranges.any.hi);
    load_q_tile<T, Cfg>(q_smem, a, g, rows, b);
    ptx::cp_async_commit();
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) {
      if (t < num_tiles) {
        loader.prefetch_units(kv_begin + t * kBlockN);
        loader.issue(stage(kv_smem, t), kv_begin + t * kBlockN);
      }
      ptx::cp_async_commit();  // always, so the group count per tile stays fixed
    }
    if (kStages - 1 < num_tiles) loader.prefetch_units(kv_begin + (kStages - 1) * kBlockN);

    RowPolicy policy;
    policy.init(a, g, rows, b, warp_row0 + (lane >> 2));
    Softmax softmax;
    softmax.init();
    float o[Cfg::kDimTiles][4];
#pragma unroll
    for (int dt = 0; dt < Cfg::kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

    uint32_t qf[Cfg::kQInRegs ? Cfg::kKSteps : 1][4];
    ptx::cp_async_wait<kStages - 1>();  // the Q group (older than the prologue's)
    __syncthreads();
    if constexpr (Cfg::kQInRegs) load_q_fragments<Cfg>(qf, q_rows, frag);

    for (int j = 0; j < num_tiles; ++j) {
      ptx::cp_async_wait<kStages - 2>();  // tile j has landed
      // Tile j is visible to all warps, and all are done with tile j - 1, whose stage the
      // next copy reuses.
      __syncthreads();
      const int next = j + kStages - 1;
      if (next < num_tiles) {
        loader.issue(stage(kv_smem, next), kv_begin + next * kBlockN);
        if (next + 1 < num_tiles) loader.prefetch_units(kv_begin + (next + 1) * kBlockN);
      }
      ptx::cp_async_commit();

      const uint32_t k_base = ptx::smem_addr(stage(kv_smem, j));
      const uint32_t v_base = k_base + Cfg::kKvTileBytes;
      float s[Cfg::kKeyTiles][4];
#pragma unroll
      for (int nt = 0; nt < Cfg::kKeyTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      if constexpr (Cfg::kQInRegs)
        qk_from_regs<T, Cfg>(s, qf, k_base, frag);
      else
        qk_from_smem<T, Cfg>(s, q_rows, k_base, frag);

      const int key0 = kv_begin + j * kBlockN;
      const bool interior = !a.has_mask && key0 >= ranges.all.lo && key0 + kBlockN <= ranges.all.hi;
      float mul = a.scale_log2;
      if (!interior || a.has_cap) mul = policy.transform<Cfg::kKeyTiles>(s, a, key0, lane);
      softmax.update(s, mul, o);
      uint32_t pf[Cfg::kKeySteps][4];
      pack_p<T, Cfg>(pf, s);
      pv<T, Cfg>(o, pf, v_base, frag);
    }

    // The staging area overlaps what other warps may still be reading (their last tile or Q
    // fragments): compute-sanitizer's racecheck flagged it, so all warps finish first.
    __syncthreads();
    const float row_d[2] = {quad_sum(softmax.d[0]), quad_sum(softmax.d[1])};
    stage_output<T, Cfg>(q_smem, o, row_d, warp_row0, lane);
    write_lse(a, g, rows, b, warp_row0, lane, softmax.m, row_d);
    __syncthreads();
    store_output<T, Cfg>(q_smem, a, g, rows, b);
    __syncthreads();  // the next M tile's copies overwrite the staging and the K/V stages
  }

  static __device__ __forceinline__ void run(const KernelArgs& a, uint8_t* smem) {
    const int64_t total = num_virtual_blocks(a);
    for (int64_t vb = blockIdx.x; vb < total; vb += gridDim.x) {
      const int sub = int(vb % a.subtiles);
      const int64_t rest = vb / a.subtiles;
      const int kv_head = int(rest % a.p.num_kv_heads);
      const int w = int(rest / a.p.num_kv_heads);
      const int b = query_tile_row(a, w);
      if (b < 0 || b >= a.p.batch_size) continue;
      const RowGeometry g = row_geometry(a, b);
      const QueryTile t = query_tile(a, w, g.qo_len);
      PackedRows rows;
      rows.group = a.group;
      rows.first = sub * Cfg::kBlockM;
      rows.count = min(Cfg::kBlockM, (t.q_end - t.q_begin) * a.group - rows.first);
      rows.q_begin = t.q_begin;
      rows.head0 = kv_head * a.group;
      if (rows.count <= 0) continue;  // block-uniform
      run_m_tile(a, smem, b, g, rows, kv_head);
    }
  }
};

template <class T, int kHeadDim>
__global__ void __launch_bounds__(TileConfig<kHeadDim>::kThreads,
                                  TileConfig<kHeadDim>::kMinBlocksPerSm)
    prefill_tc_kernel(const __grid_constant__ KernelArgs args) {
  extern __shared__ __align__(128) uint8_t smem[];
  PrefillTcBlock<T, kHeadDim>::run(args, smem);
}

}  // namespace flashpage::cuda::prefill_tc
