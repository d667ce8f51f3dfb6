#pragma once
// The compiled tile shape of the tensor-core prefill, as constexpr facts shared by the host
// launcher (grid, shared memory) and the kernel.
//
// A block is 4 warps; each warp owns 16 rows of the M tile, so M = 64 rows. Rows are
// (query token, query head of the GQA group) pairs, token-major: packed row r of a query tile
// is token r / group, head r % group. A planned query tile of 64 tokens therefore holds
// 64 * group rows = `group` M tiles; each M tile is its own block (adjacent in the grid, so
// they stream the same K/V through L2 at about the same time). M = 64 keeps the per-warp
// register budget (Q fragments + S + O accumulators) spill-free up to head_dim 256.
#include <cstdint>

namespace flashpage::cuda::prefill_tc {

constexpr int kWarpRows = 16;    // rows of one m16n8k16 A operand
constexpr int kChunkBytes = 16;  // one cp.async / ldmatrix row
constexpr int kDefaultTileTokens = 64;  // query tokens per tile when no work list is given

template <int kHeadDim>
struct TileConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256);
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kWarpRows * kWarps;
  // Keys per tile: 64 keeps S at 32 floats per thread; head_dim 256 halves it because the
  // O accumulator alone is 128 floats per thread there.
  static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;
  static constexpr int kStages = 2;  // K/V tiles in flight (double buffering)
  // Blocks per SM the register budget is sized for: shared memory allows 2 at D = 128/256
  // (80/96 KiB); at D = 64 (40 KiB) registers decide, and 4 blocks (128 registers) spill.
  static constexpr int kMinBlocksPerSm = kHeadDim == 64 ? 3 : 2;
  // Q fragments live in registers for D <= 128 (32 registers); at 256 they would be 64 and
  // push the thread past 255, so they are re-read from shared memory each tile.
  static constexpr bool kQInRegs = kHeadDim <= 128;

  static constexpr int kElemBytes = 2;
  static constexpr int kRowBytes = kHeadDim * kElemBytes;
  static constexpr int kChunksPerRow = kRowBytes / kChunkBytes;
  static_assert(kChunksPerRow >= 8, "the XOR swizzle needs >= 8 chunks per row");
  static constexpr int kKSteps = kHeadDim / 16;   // MMA k steps of Q.K^T
  static constexpr int kDimTiles = kHeadDim / 8;  // n8 tiles of O
  static constexpr int kKeyTiles = kBlockN / 8;   // n8 tiles of S
  static constexpr int kKeySteps = kBlockN / 16;  // MMA k steps of P.V

  // Copies: one pass of the block moves kRowsPerPass rows of 16-byte chunks.
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static constexpr int kQPasses = kBlockM / kRowsPerPass;
  static constexpr int kKvPasses = kBlockN / kRowsPerPass;
  static_assert(kThreads % kChunksPerRow == 0 && kBlockN % kRowsPerPass == 0);

  static constexpr int kQBytes = kBlockM * kRowBytes;  // also the epilogue's staging area
  static constexpr int kKvTileBytes = kBlockN * kRowBytes;
  static constexpr int kStageBytes = 2 * kKvTileBytes;  // K then V
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes;
};

}  // namespace flashpage::cuda::prefill_tc
