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
// Only the warpgroup's 128 threads synchronise (named barrier), once before writing (every
// warp's S GEMMs, which read these Q rows, have completed); each warp then reads back only its
// own rows. The caller frees the Q stage afterwards.
#include <cstdint>

#include "cuda/prefill_hopper/scheduler.cuh"
#include "cuda/prefill_hopper/sm90_ptx.cuh"
#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/prefill_tc/epilogue.cuh"
#include "cuda/ptx.cuh"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda::prefill_hopper {

// + consumer warpgroup: ids 3, 4 (4-6 with three math warpgroups), after the turn barriers
// (consumer_mainloop.cuh).
template <int kMathWarpgroups>
constexpr uint32_t kEpilogueBarrier = 1 + kMathWarpgroups;

template <class T, int kHeadDim, int kMathWarpgroups = 2>
struct Epilogue {
  using Cfg = TileConfig<kHeadDim, kMathWarpgroups>;
  static constexpr int kRowsPerPass = 128 / Cfg::kChunks;

  const prefill_tc::KernelArgs& k;
  uint8_t* staging;
  int wg, t;  // consumer warpgroup (0 ..) and thread in it
  bool stores = true;  // false: O is staged but not stored (HopperArgs::ablate bit 2)
#if FLASHPAGE_PREFILL_O_TMA
  const OTma* o_tma = nullptr;  // the experiment's map; null or box_tokens 0: thread stores
#endif

  __device__ __forceinline__ void sync() const {
    sm90::named_sync(kEpilogueBarrier<Cfg::kConsumerWarpgroups> + wg, 128);
  }

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

  // Each warp reads back only the 16 rows it staged, so after the staging a __syncwarp is
  // enough; lane l < 16 resolves row warp_row0 + l's output address once (a division by the
  // group and 64-bit offsets), and each pass shuffles it to the lanes storing that row. ncu
  // (bench/NOTES.md, session 11): with a WG barrier and the address resolved per 16-byte
  // store, the epilogue executed ~610 instructions per warp and M tile, ~40% of a 4-tile
  // main loop at 64 x 512.
  static constexpr int kWarpRows = 16;
  static_assert(Cfg::kChunks <= 32, "one lane per 16-byte chunk of a row");
  static constexpr int kWarpRowsPerPass = 32 / Cfg::kChunks;

  // What both staged epilogues start with: the warp's first row, its two rows' denominators
  // (quad sums) and, in lane l < 16, row row0 + l's output address (nullptr past the tile's
  // rows), resolved once and shuffled to the lanes that store the row.
  struct WarpRows {
    int row0;
    float d[2];
    T* lane_out;
  };
  __device__ __forceinline__ WarpRows warp_rows(const MTile& tile, const float (&d)[2],
                                                int lane) const {
    WarpRows w;
    w.row0 = wg * Cfg::kWarpgroupRows + (t >> 5) * kWarpRows;
    w.d[0] = prefill_tc::quad_sum(d[0]);
    w.d[1] = prefill_tc::quad_sum(d[1]);
    const int my_row = w.row0 + (lane & (kWarpRows - 1));
    w.lane_out = my_row < tile.rows.count ? out_row(tile, my_row) : nullptr;
    return w;
  }

  __device__ __forceinline__ void store(const MTile& tile, const float (&o)[Cfg::kDimTiles][4],
                                        const float (&m)[2], const float (&d)[2]) const {
    const int lane = t & 31;
    // The row address first: its loads and divisions overlap the barrier and the staging.
    const WarpRows w = warp_rows(tile, d, lane);
    const int warp_row0 = w.row0;
    const float(&row_d)[2] = w.d;
    T* const my_out = w.lane_out;
    sync();  // every warp's S GEMMs on these Q rows have completed: staging may overwrite them
    stage(o, row_d, warp_row0, lane);
    prefill_tc::write_lse(k, tile.g, tile.rows, tile.b, warp_row0, lane, m, row_d);
#if FLASHPAGE_PREFILL_O_TMA
    if (o_tma != nullptr && o_tma->box_tokens > 0 && stores &&
        warp_row0 + kOTmaWarpRows <= tile.rows.count) {  // all 16 rows the tile's
      store_warp_tma(tile, warp_row0, lane);
      return;
    }
#endif
    __syncwarp();
    const int sub_row = lane / Cfg::kChunks, chunk = lane % Cfg::kChunks;
#pragma unroll
    for (int pass = 0; pass < kWarpRows / kWarpRowsPerPass; ++pass) {
      const int row_in_warp = pass * kWarpRowsPerPass + sub_row;
      T* dst = reinterpret_cast<T*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(my_out), row_in_warp));
      if (dst == nullptr || !stores) continue;  // past the tile's rows
      const int r = warp_row0 + row_in_warp;
      const uint4 value =
          *reinterpret_cast<const uint4*>(staging + tile_chunk_offset(r, chunk, Cfg::kBlockM));
      *reinterpret_cast<uint4*>(dst + chunk * (kChunkBytes / Cfg::kElemBytes)) = value;
    }
  }

#if FLASHPAGE_PREFILL_O_TMA
  // The warp's 16 staged rows by TMA (o_tma.h): each thread fences its staged writes over to
  // the async proxy, then lane 0 stores one box per column block and waits until the copies
  // have read the stage, which the caller frees after this returns.
  __device__ __forceinline__ void store_warp_tma(const MTile& tile, int warp_row0, int lane) const {
    static_assert(kWarpRows == kOTmaWarpRows, "one box holds a warp's staged rows");
    sm90::fence_proxy_async();
    __syncwarp();
    if (lane == 0) {
      // (first + warp_row0) / group without a division: 16 divides first (a multiple of 128)
      // and warp_row0, and the group divides 16.
      const int token = tile.g.qo_start + tile.rows.q_begin +
                        (tile.rows.first / kOTmaWarpRows + warp_row0 / kOTmaWarpRows) *
                            o_tma->box_tokens;
      const int row = o_tma->batch_coord != 0 ? tile.b : 0;
      const uint32_t base = sm90::smem_u32(staging) + uint32_t(warp_row0 * kSwizzleRowBytes);
#pragma unroll
      for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
        sm90::tma_store_4d(&o_tma->map, base + uint32_t(cb * Cfg::kBlockM * kSwizzleRowBytes),
                           cb * (kSwizzleRowBytes / Cfg::kElemBytes), tile.rows.head0, token, row);
      sm90::bulk_commit_group();
      sm90::bulk_wait_read_all();
    }
    __syncwarp();
  }
#endif

  // For a tile whose Q stage is already released (one Q stage, kEarlyQRelease): O through
  // the warp's own staging buffer (`staging`, 8 rows), in two passes of 8 rows (accumulator
  // rows lane/4, then lane/4 + 8). Chunk c of staged row r sits at r * row bytes + (c / 8) *
  // 128 + ((c % 8) ^ r) * 16: the 4-byte writes (8 rows x one chunk per warp) and the 16-byte
  // reads (whole rows) are free of bank conflicts. Only __syncwarp: the buffer is the warp's.
  // (Stores straight from the accumulators, 4 bytes per thread, were 2-11% slower.)
  static_assert(kWarpRows == 2 * Cfg::kOStagingRows, "two passes of the warp's rows");
  __device__ __forceinline__ void store_warp_staged(const MTile& tile,
                                                    const float (&o)[Cfg::kDimTiles][4],
                                                    const float (&m)[2], const float (&d)[2]) const {
    const int lane = t & 31;
    const WarpRows w = warp_rows(tile, d, lane);
    prefill_tc::write_lse(k, tile.g, tile.rows, tile.b, w.row0, lane, m, w.d);
    auto offset = [](int row, int chunk) {
      return uint32_t(row * Cfg::kRowBytes + (chunk >> 3) * kSwizzleRowBytes +
                      (((chunk & 7) ^ row) << 4));
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv = w.d[h] > 0.0f ? 1.0f / w.d[h] : 0.0f;
      const int my_row = lane >> 2;  // accumulator row lane / 4 + 8 h of the warp's 16
#pragma unroll
      for (int dt = 0; dt < Cfg::kDimTiles; ++dt)
        *reinterpret_cast<uint32_t*>(staging + offset(my_row, dt) + (lane & 3) * 4) =
            ptx::pack2<T>(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
      __syncwarp();
      const int chunk = lane % Cfg::kChunks;  // one lane per 16-byte chunk of a row
#pragma unroll
      for (int rr = 0; rr < Cfg::kOStagingRows; rr += kWarpRowsPerPass) {
        const int row = rr + lane / Cfg::kChunks;
        T* dst = reinterpret_cast<T*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(w.lane_out),
                        Cfg::kOStagingRows * h + row));
        if (dst != nullptr && stores)  // past the tile's rows
          *reinterpret_cast<uint4*>(dst + chunk * (kChunkBytes / Cfg::kElemBytes)) =
              *reinterpret_cast<const uint4*>(staging + offset(row, chunk));
      }
      __syncwarp();  // read back before the next pass overwrites
    }
  }

  // An experiment (FLASHPAGE_PREFILL_REG_EPILOGUE, bench/NOTES.md session 25): O stored
  // straight from the accumulators, without shared memory. The four lanes of a quad hold one
  // row's 8-column blocks two columns (one 32-bit word) each; a 4 x 4 transpose of words
  // inside the quad (two exchanges, transpose_quad) gives each lane a whole block, stored as
  // 16 bytes (each 8-row store then writes whole 32-byte sectors). With no staging, the
  // tile's slot is the last thing read from shared memory, so `release` (the Q stage) runs
  // right after the rows are resolved and the LSE is written, before the shuffles and stores.
  template <class Release>
  __device__ __forceinline__ void store_from_registers(const MTile& tile,
                                                       const float (&o)[Cfg::kDimTiles][4],
                                                       const float (&m)[2], const float (&d)[2],
                                                       Release&& release) const {
    static_assert(Cfg::kDimTiles % 4 == 0, "blocks go four at a time through a quad");
    const int lane = t & 31;
    const WarpRows w = warp_rows(tile, d, lane);
    prefill_tc::write_lse(k, tile.g, tile.rows, tile.b, w.row0, lane, m, w.d);
    release();
    const int q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv = w.d[h] > 0.0f ? 1.0f / w.d[h] : 0.0f;
      // Accumulator row lane / 4 + 8 h of the warp's 16 (lane_out: lanes 0..15).
      T* const row = reinterpret_cast<T*>(__shfl_sync(
          0xffffffffu, reinterpret_cast<uintptr_t>(w.lane_out), (lane >> 2) + 8 * h));
#pragma unroll
      for (int j = 0; j < Cfg::kDimTiles / 4; ++j) {
        uint32_t x[4];  // x[b]: this lane's word q of block 4 j + b
#pragma unroll
        for (int b = 0; b < 4; ++b)
          x[b] = ptx::pack2<T>(o[4 * j + b][2 * h] * inv, o[4 * j + b][2 * h + 1] * inv);
        transpose_quad(x, q);  // x[s]: lane s's word of block 4 j + q
        if (row != nullptr && stores)  // past the tile's rows; ablation bit 2
          *reinterpret_cast<uint4*>(row + (4 * j + q) * (kChunkBytes / Cfg::kElemBytes)) =
              make_uint4(x[0], x[1], x[2], x[3]);
      }
    }
  }

  // Lane q of a quad holds row q of a 4 x 4 matrix of words (x[c] = M[q][c]); afterwards it
  // holds column q (x[r] = M[r][q]). First the off-diagonal 2 x 2 blocks swap (lane q ^ 2),
  // then each 2 x 2 block transposes (lane q ^ 1).
  static __device__ __forceinline__ void transpose_quad(uint32_t (&x)[4], int q) {
    exchange_words<2>(x, q);
    exchange_words<1>(x, q);
  }
  // With lane q ^ kBit: the two words whose index differs from q in bit kBit go across and
  // the partner's come back in their place.
  template <int kBit>
  static __device__ __forceinline__ void exchange_words(uint32_t (&x)[4], int q) {
    constexpr int kStride = kBit ^ 3;  // index distance of the two words exchanged
    const bool low = (q & kBit) == 0;
    const uint32_t r0 = __shfl_xor_sync(0xffffffffu, low ? x[kBit] : x[0], kBit);
    const uint32_t r1 = __shfl_xor_sync(0xffffffffu, low ? x[kBit + kStride] : x[kStride], kBit);
    if (low) {
      x[kBit] = r0;
      x[kBit + kStride] = r1;
    } else {
      x[0] = r0;
      x[kStride] = r1;
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
