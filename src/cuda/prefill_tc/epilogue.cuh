#pragma once
// Epilogue of an M tile: O / d in T, staged through shared memory (the Q tile's space, in the
// same swizzled layout) so that global stores are whole 16-byte chunks of a row; LSE (f32,
// natural log) per row. A row that saw no key has d = 0: zeros and -inf.
#include <cstdint>

#include "cuda/prefill_tc/fragment_layout.h"
#include "cuda/prefill_tc/online_softmax.cuh"
#include "cuda/prefill_tc/problem_view.cuh"
#include "cuda/ptx.cuh"

namespace flashpage::cuda::prefill_tc {

// Writes the warp's normalised rows (warp_row0 .. +15; accumulator layout, fragment_layout.h)
// into a staging tile whose 16-byte chunk `chunk` of row `row` sits at chunk_offset(row,
// chunk): dim tile dt is exactly chunk dt, this lane's pair 4 bytes per lane % 4 into it.
// Call after every reader of the tile has passed a barrier.
template <class T, int kDimTiles, class ChunkOffset>
__device__ __forceinline__ void stage_rows(uint8_t* stage, const float (&o)[kDimTiles][4],
                                           const float (&row_d)[2], int warp_row0, int lane,
                                           ChunkOffset chunk_offset) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const float inv = row_d[k] > 0.0f ? 1.0f / row_d[k] : 0.0f;
    const int row = warp_row0 + acc_row(lane, 2 * k);
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) {
      const uint32_t off = chunk_offset(row, dt) + (lane & 3) * 4;
      *reinterpret_cast<uint32_t*>(stage + off) =
          ptx::pack2<T>(o[dt][2 * k] * inv, o[dt][2 * k + 1] * inv);
    }
  }
}

// stage_rows into prefill_tc's swizzled row layout (the Q tile's space).
template <class T, class Cfg>
__device__ __forceinline__ void stage_output(uint8_t* stage, const float (&o)[Cfg::kDimTiles][4],
                                             const float (&row_d)[2], int warp_row0, int lane) {
  stage_rows<T>(stage, o, row_d, warp_row0, lane, [](int row, int chunk) {
    return swizzled_offset(row, chunk, Cfg::kRowBytes);
  });
}

__device__ __forceinline__ void write_lse(const KernelArgs& a, const RowGeometry& g,
                                          const PackedRows& rows, int b, int warp_row0, int lane,
                                          const float (&m)[2], const float (&row_d)[2]) {
  if (a.p.lse == nullptr || (lane & 3) != 0) return;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int r = warp_row0 + acc_row(lane, 2 * k);
    if (r >= rows.count) continue;
    int i, head;
    rows.locate(r, i, head);
    a.p.lse[token_offset(b, g.qo_start, i, head, a.p.lse_stride_batch, a.p.lse_stride_token,
                         a.p.lse_stride_head)] = softmax_lse(m[k], row_d[k]);
  }
}

// Copies the staged tile to the output, 16 bytes per thread and pass. Call after a barrier
// that follows every stage_output.
template <class T, class Cfg>
__device__ __forceinline__ void store_output(const uint8_t* stage, const KernelArgs& a,
                                             const RowGeometry& g, const PackedRows& rows,
                                             int b) {
  T* out = static_cast<T*>(a.p.out);
  const int chunk = int(threadIdx.x) % Cfg::kChunksPerRow;
  const int row0 = int(threadIdx.x) / Cfg::kChunksPerRow;
#pragma unroll
  for (int pass = 0; pass < Cfg::kQPasses; ++pass) {
    const int r = row0 + pass * Cfg::kRowsPerPass;
    if (r >= rows.count) break;  // rows grow with the pass
    int i, head;
    rows.locate(r, i, head);
    const uint4 value =
        *reinterpret_cast<const uint4*>(stage + swizzled_offset(r, chunk, Cfg::kRowBytes));
    T* dst = out +
             token_offset(b, g.qo_start, i, head, a.p.out_stride_batch, a.p.out_stride_token,
                          a.p.out_stride_head) +
             chunk * (kChunkBytes / Cfg::kElemBytes);
    *reinterpret_cast<uint4*>(dst) = value;
  }
}

}  // namespace flashpage::cuda::prefill_tc
