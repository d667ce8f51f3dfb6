#pragma once
// The Hopper prefill's tile shape, shared-memory plan, swizzled tile layout and wgmma matrix
// descriptors, as constexpr host+device code so a host test (tests/test_prefill_hopper_layout
// .cpp) checks them against the PTX ISA's canonical layouts.
//
// Tiles (Q: 128 query rows, 192 with three math warpgroups; K and V: 128 keys, 64 at head_dim
// 256) hold rows of head_dim 16-bit elements in the wgmma "128-byte swizzle" layout (PTX ISA
// 9.7.15.5.1.2, Figure "K major 128B swizzling"):
//   - a row is cut into 64-element column blocks (128 bytes = one swizzle row);
//   - column block cb of all R rows is one contiguous R x 128-byte array, at cb * R * 128;
//   - row r of a block sits at r * 128, its 16-byte chunk c (elements 8c..8c+7) at
//     ((c ^ (r % 8)) * 16): the hardware's Swizzle<3,4,3> (address bits [4,7) ^= bits [7,10)),
//     which is this XOR because every tile starts on a 1024-byte boundary.
// One layout serves both operand forms: K-major for Q and K (the reduction index, head_dim, is
// contiguous) and MN-major for V in O += P V (there the contiguous index, head_dim, is N).
#include <cstdint>

#if defined(__CUDACC__)
#define FP_HOPPER_HD __host__ __device__ __forceinline__
#else
#define FP_HOPPER_HD inline
#endif

namespace flashpage::cuda::prefill_hopper {

constexpr int kSwizzleRowBytes = 128;  // one 128B-swizzle row: 64 16-bit elements
constexpr int kSwizzleAtomBytes = 8 * kSwizzleRowBytes;  // the 8-row pattern that repeats
constexpr int kChunkBytes = 16;
constexpr int kTileSlotBytes = 128;  // shared-memory room for one TileSlot (scheduler.cuh)
constexpr int kWarpgroupRows = 64;   // wgmma M: one consumer warpgroup's rows of an M tile
constexpr int kProducerWarps = 4;    // the load warpgroup; each warp copies a quarter of a tile
// Ragged rows' seek table (scheduler.cuh, seek_row): static shared memory beside the plan below.
constexpr int kSeekEntries = 256;
constexpr int kSeekTableBytes = kSeekEntries * 4;

// Math warpgroups per block, each taking 64 rows of an M tile: two, or three at head_dim 64
// (FlashAttention-3's 192-row tiles: there a warpgroup's softmax takes as long as its GEMMs,
// so two warpgroups' softmaxes overlap each other rather than the other's GEMMs, and a third
// fills the gaps; bench/NOTES.md, session 33). The host picks per call (prefill_hopper.cu).
constexpr int kMaxMathWarpgroups = 3;
// Query rows of an M tile; also the query tokens of a range without a work list
// (scheduler.cuh), so MHA ranges fill their tiles.
constexpr int m_tile_rows(int math_warpgroups) { return kWarpgroupRows * math_warpgroups; }

// Keys of a K/V tile (wgmma N of S = Q K^T). At head_dim 256 a consumer thread's O alone
// takes 128 registers, so S gets 64 keys (32 registers) to stay inside its 224 registers
// (kernel.cuh, RegisterSplit); the FLOPs per K/V tile are those of head_dim 128 with 128 keys.
// A function so the host (the TMA boxes, kv_tma.cu) reads the same value as TileConfig.
constexpr int kv_tile_rows(int head_dim) { return head_dim == 256 ? 64 : 128; }
// K/V rows each producer warp copies of a tile.
constexpr int kv_slice_rows(int head_dim) { return kv_tile_rows(head_dim) / kProducerWarps; }

template <int kHeadDim, int kMathWarpgroups = 2>
struct TileConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "Hopper prefill: head_dim 64, 128 or 256");
  static_assert(kMathWarpgroups == 2 || (kMathWarpgroups == 3 && kHeadDim == 64),
                "three math warpgroups at head_dim 64 only (registers and shared memory)");
  static constexpr int kBlockM = m_tile_rows(kMathWarpgroups);
  static constexpr int kBlockN = kv_tile_rows(kHeadDim);
  static constexpr int kKvSliceRows = kv_slice_rows(kHeadDim);
  // Ring depths. V gets one stage more than K where shared memory allows: a V stage frees
  // only when P V of its tile completes, half an iteration after K's S GEMM does, and with two
  // V stages the consumers waited on V (ncu stall sampling, bench/NOTES.md).
  static constexpr int kKStages = kHeadDim == 64 ? 3 : 2;
  static constexpr int kVStages = kHeadDim == 64 ? 4 : kHeadDim == 128 ? 3 : 2;
  static constexpr int kConsumerWarpgroups = kMathWarpgroups;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = 128 + kConsumerThreads;  // + the load warpgroup
  static constexpr int kWarpgroupRows = prefill_hopper::kWarpgroupRows;

  static constexpr int kElemBytes = 2;
  static constexpr int kRowBytes = kHeadDim * kElemBytes;
  static constexpr int kChunks = kRowBytes / kChunkBytes;       // 16-byte chunks per row
  static constexpr int kColBlocks = kRowBytes / kSwizzleRowBytes;  // 64-element blocks per row
  static constexpr int kKSteps = kHeadDim / 16;   // wgmma k16 steps of S = Q K^T
  static constexpr int kPvSteps = kBlockN / 16;   // wgmma k16 steps of O += P V
  static constexpr int kKeyTiles = kBlockN / 8;   // n8 column blocks of S (accumulator rows)
  static constexpr int kDimTiles = kHeadDim / 8;  // n8 column blocks of O

  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kKvBytes = kBlockN * kRowBytes;
  // Q ring: at least two stages, so the next M tile's Q loads while this one runs (a single
  // Q buffer freed only after the tile's last S GEMM left each tile start waiting for its Q);
  // one at head_dim 256, where 2 x 64 KB do not fit beside the K/V stages. With two, tile
  // i + 1's Q can load only once tile i - 1's epilogue freed its stage, which comes during
  // tile i's first K/V step: a tile of one or two K/V tiles (causal short rows) then waited
  // for its successor's Q at every boundary (ncu, bench/NOTES.md session 14). A third stage
  // frees a tile earlier; head_dim 64 has the room (head_dim 128 has it only at the cost of
  // a V stage, which measured slower).
  static constexpr int kQStages = kHeadDim == 256 ? 1 : kHeadDim == 64 ? 3 : 2;
  // With two or more Q stages the epilogue stages O in the tile's own Q stage (each
  // warpgroup in its own rows, epilogue.cuh) and releases the stage after it: no separate O
  // buffer. With one,
  // the consumers release the stage as soon as the tile's last S GEMM has read it, so the
  // next tile's Q loads during the last softmax, P V and epilogue, and the epilogue stores O
  // through a buffer of its own (consumer_mainloop.cuh, kEarlyQRelease): 8 rows per math warp
  // at a time, 32 KB at head_dim 256, which fits beside the stages where a whole 64 KB tile
  // does not.
  static constexpr bool kEarlyQRelease = kQStages == 1;
  static constexpr int kOStagingRows = 8;  // per math warp and pass: accumulator rows lane / 4
  static constexpr int kOStagingWarpBytes = kOStagingRows * kRowBytes;
  // Shared-memory plan, from a 1024-byte aligned base (every tile is a whole number of
  // swizzle atoms, so every tile and every column block starts 1024-aligned).
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQStages * kQBytes;
  static constexpr int kVOffset = kKOffset + kKStages * kKvBytes;
  static constexpr int kOStagingOffset = kVOffset + kVStages * kKvBytes;
  static constexpr int kBarrierOffset =
      kOStagingOffset + (kEarlyQRelease ? kConsumerWarpgroups * 4 * kOStagingWarpBytes : 0);
  static constexpr int kNumBarriers = 2 * (kQStages + kKStages + kVStages);  // full/empty
  // Tile slots, taken in turn by the M tiles: what the producer resolved about a tile
  // (scheduler.cuh, TileSlot), so the consumers need not resolve it again. With two or more
  // Q stages tile i's slot is its Q stage's; with one there are two, and tile i's slot
  // outlives the early release of its Q stage: the producer writes tile i + 2's slot only
  // after the consumers released tile i + 1's Q, which they do after tile i's epilogue.
  static constexpr int kTileSlots = kQStages == 1 ? 2 : kQStages;
  static constexpr int kTileSlotOffset = kBarrierOffset + kNumBarriers * 8;
  static constexpr int kSmemBytes = kTileSlotOffset + kTileSlots * kTileSlotBytes;
  // The dynamic shared-memory base is only 16-byte aligned by contract: ask for one atom more
  // and round up at run time.
  static constexpr int kSmemLaunchBytes = kSmemBytes + kSwizzleAtomBytes;

  static_assert(kQBytes % kSwizzleAtomBytes == 0 && kKvBytes % kSwizzleAtomBytes == 0);
  static_assert(kSmemLaunchBytes + kSeekTableBytes <= 227 * 1024,
                "over the sm_90 shared memory per block");
};

// Byte offset of 16-byte chunk `chunk` (0 .. row_bytes/16 - 1) of row `row` in a swizzled
// tile of `rows` rows.
FP_HOPPER_HD constexpr uint32_t tile_chunk_offset(int row, int chunk, int rows) {
  return uint32_t((chunk >> 3) * rows * kSwizzleRowBytes + row * kSwizzleRowBytes +
                  (((chunk & 7) ^ (row & 7)) << 4));
}

// ---- wgmma shared-memory matrix descriptors (PTX ISA 9.7.15.5.1.2.2) ---------------------
//   bits  0-13  start address >> 4        bits 16-29  leading-dimension byte offset >> 4
//   bits 32-45  stride-dimension byte offset >> 4
//   bits 49-51  base offset: 0, because every swizzle pattern starts on a 1024-byte boundary
//   bits 62-63  swizzle mode: 1 = 128-byte swizzle (the layout above)
FP_HOPPER_HD constexpr uint64_t desc_encode(uint32_t bytes) { return (bytes & 0x3FFFF) >> 4; }

FP_HOPPER_HD constexpr uint64_t make_desc(uint32_t start, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return desc_encode(start) | (desc_encode(lbo_bytes) << 16) | (desc_encode(sbo_bytes) << 32) |
         (uint64_t(1) << 62);
}

// K-major operand (Q as A, K as B of S = Q K^T); canonical layout, in elements
// (T = 8 per 16 bytes): Swizzle<3,4,3> o ((8,m),(T,2k)):((8T,SBO),(1,T)).
//   SBO = 1024: rows r and r + 8 are one swizzle atom apart (8 rows x 128 bytes).
//   LBO: unused by swizzled K-major layouts ("assumed to be 1"): encoded 1 (16 bytes).
//   start: the tile (or the warpgroup's first row) + the k step's column block
//   (kk / 4) * R * 128 + 32 bytes per k16 step inside the 128-byte row, (kk % 4) * 32. The
//   hardware swizzles the computed address, so stepping the start by 32 bytes inside a
//   1024-aligned atom reads logical chunks 2(kk%4), 2(kk%4)+1 of every row: exactly where
//   tile_chunk_offset put them.
constexpr uint32_t kKMajorLbo = 16;
constexpr uint32_t kKMajorSbo = kSwizzleAtomBytes;

FP_HOPPER_HD constexpr uint64_t k_major_desc(uint32_t start) {
  return make_desc(start, kKMajorLbo, kKMajorSbo);
}
// Start-address offset (bytes) of k16 step kk of a K-major tile of `rows` rows.
FP_HOPPER_HD constexpr uint32_t k_major_step_offset(int kk, int rows) {
  return uint32_t((kk >> 2) * rows * kSwizzleRowBytes + (kk & 3) * 32);
}

// MN-major operand (V as B of O += P V: N = head_dim, contiguous; K = keys, the rows).
// Canonical layout, in elements: Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)).
//   64 consecutive N elements (one 128-byte row of a column block) for each k, k rows 128
//   bytes apart; LBO = distance between 64-element N blocks = one column block of the tile,
//   kBlockN * 128 bytes ("offset from the first (swizzle-byte-size/16) rows to the next",
//   rows in 16-byte units along N); SBO = distance between groups of 8 k = 1024 bytes
//   ("offset from the first 8 columns to the next 8 columns", columns along K).
//   start: the tile + 16 keys (two atoms, 2048 bytes) per k16 step; stays 1024-aligned.
FP_HOPPER_HD constexpr uint64_t mn_major_desc(uint32_t start, int rows) {
  return make_desc(start, uint32_t(rows * kSwizzleRowBytes), kSwizzleAtomBytes);
}
FP_HOPPER_HD constexpr uint32_t mn_major_step_offset(int ks) {
  return uint32_t(ks * 2 * kSwizzleAtomBytes);
}

// ---- register fragments (PTX ISA "Matrix Fragments for wgmma.mma_async.m64nNk16") --------
// Thread t (0..127) of a warpgroup holds accumulator d[j][e] (wgmma_ops.cuh) at:
FP_HOPPER_HD constexpr int wg_acc_row(int t, int e) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (e / 2); }
FP_HOPPER_HD constexpr int wg_acc_col(int t, int j, int e) { return 8 * j + 2 * (t % 4) + (e % 2); }
// A from registers: register r (0..3) of k16 step s holds two elements, low half first, of
// row wg_acc_row(t, 2 * (r % 2)) and columns 16s + 8 * (r / 2) + 2 * (t % 4) + {0, 1}; i.e.
// the two accumulators d[2s + r / 2][2 * (r % 2) + {0, 1}] of S become register r of step s
// (pack_p in consumer_mainloop.cuh), with no data movement between threads.

}  // namespace flashpage::cuda::prefill_hopper
