#pragma once
// Epilogue of an M tile, per consumer warpgroup (its 64 rows): O / d in T staged through
// shared memory (the tile's own Q stage: no separate O buffer, smem_layout.h), then 16-byte
// stores of whole row chunks; LSE (f32, natural log) per row. A row that saw no key has
// d = 0: zeros and -inf (DESIGN.md).
//
// Staging uses the Q tile's swizzled layout (tile_chunk_offset over kBlockM rows), so a
// warpgroup's rows occupy exactly its own Q rows and never the other warpgroup's, whose last
// S GEMM may still run. Both the 4-byte fragment writes (a warp covers 8 rows x 4 words of
// one chunk: the XOR spreads the rows over all 32 banks) and the 16-byte reads (8 lanes read
// one 128-byte swizzle row) are free of bank conflicts.
//
// Only the warpgroup's 128 threads synchronise (named barrier): once before writing (every
// warp's S GEMMs, which read these Q rows, have completed) and once before reading back. The
// caller frees the Q stage afterwards.
#include <cstdint>

#include "cuda/prefill_hopper/scheduler.cuh"
#include "cuda/prefill_hopper/sm90_ptx.cuh"
#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/prefill_tc/epilogue.cuh"
#include "cuda/ptx.cuh"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda::prefill_hopper {

constexpr uint32_t kEpilogueBarrier = 3;  // + consumer warpgroup (ids 3, 4)

template <class T, int kHeadDim>
struct Epilogue {
  using Cfg = TileConfig<kHeadDim>;
  static constexpr int kRowsPerPass = 128 / Cfg::kChunks;

  const prefill_tc::KernelArgs& k;
  uint8_t* staging;
  int wg, t;  // consumer warpgroup (0, 1) and thread in it

  __device__ __forceinline__ void sync() const { sm90::named_sync(kEpilogueBarrier + wg, 128); }

  // Row r of the tile -> its output row pointer (chunk 0).
  __device__ __forceinline__ T* out_row(const MTile& tile, int r) const {
    int i, head;
    tile.rows.locate(r, i, head);
    return static_cast<T*>(k.p.out) +
           prefill_tc::token_offset(tile.b, tile.g.qo_start, i, head, k.p.out_stride_batch,
                                    k.p.out_stride_token, k.p.out_stride_head);
  }

  // The warp's rows warp_row0 .. +15, normalised, into the staging tile (Q's layout).
  __device__ __forceinline__ void stage(const float (&o)[Cfg::kDimTiles][4], const float (&row_d)[2],
                                        int warp_row0, int lane) const {
    prefill_tc::stage_rows<T>(staging, o, row_d, warp_row0, lane, [](int row, int chunk) {
      return tile_chunk_offset(row, chunk, Cfg::kBlockM);
    });
  }

  __device__ __forceinline__ void store(const MTile& tile, const float (&o)[Cfg::kDimTiles][4],
                                        const float (&m)[2], const float (&d)[2]) const {
    const int lane = t & 31;
    const int warp_row0 = wg * Cfg::kWarpgroupRows + (t >> 5) * 16;
    const float row_d[2] = {prefill_tc::quad_sum(d[0]), prefill_tc::quad_sum(d[1])};
    sync();
    stage(o, row_d, warp_row0, lane);
    prefill_tc::write_lse(k, tile.g, tile.rows, tile.b, warp_row0, lane, m, row_d);
    sync();
    const int chunk = t % Cfg::kChunks;
#pragma unroll
    for (int pass = 0; pass < Cfg::kWarpgroupRows / kRowsPerPass; ++pass) {
      const int r = wg * Cfg::kWarpgroupRows + pass * kRowsPerPass + t / Cfg::kChunks;
      if (r >= tile.rows.count) break;  // rows grow with the pass
      const uint4 value =
          *reinterpret_cast<const uint4*>(staging + tile_chunk_offset(r, chunk, Cfg::kBlockM));
      *reinterpret_cast<uint4*>(out_row(tile, r) + chunk * (kChunkBytes / Cfg::kElemBytes)) = value;
    }
  }

  // A tile whose rows see no key: zeros and -inf, nothing staged.
  __device__ __forceinline__ void store_empty(const MTile& tile) const {
    const int chunk = t % Cfg::kChunks;
    for (int pass = 0; pass < Cfg::kWarpgroupRows / kRowsPerPass; ++pass) {
      const int r = wg * Cfg::kWarpgroupRows + pass * kRowsPerPass + t / Cfg::kChunks;
      if (r >= tile.rows.count) break;
      *reinterpret_cast<uint4*>(out_row(tile, r) + chunk * (kChunkBytes / Cfg::kElemBytes)) =
          make_uint4(0u, 0u, 0u, 0u);
    }
    const int r = wg * Cfg::kWarpgroupRows + t;
    if (k.p.lse != nullptr && t < Cfg::kWarpgroupRows && r < tile.rows.count) {
      int i, head;
      tile.rows.locate(r, i, head);
      k.p.lse[prefill_tc::token_offset(tile.b, tile.g.qo_start, i, head, k.p.lse_stride_batch,
                                       k.p.lse_stride_token, k.p.lse_stride_head)] = kNegInf;
    }
  }
};

}  // namespace flashpage::cuda::prefill_hopper
