#pragma once
// The framework-free parameter block of the paged decode kernels and the tile configuration
// that both the host launcher and the kernel compile against.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/page_table_view.cuh"
#include "ops/decode_tiling.h"

namespace flashpage::cuda {

struct DecodeArgs {
  const void* q = nullptr;  // [B, Hq, D], last dim contiguous
  int64_t q_stride_batch = 0, q_stride_head = 0;
  const void* k_pages = nullptr;
  const void* v_pages = nullptr;
  PageTableView pages;
  void* out = nullptr;  // [B, Hq, D] in q's dtype, last dim contiguous
  int64_t out_stride_batch = 0, out_stride_head = 0;
  float* lse = nullptr;  // [B, Hq] or null
  int64_t lse_stride_batch = 0, lse_stride_head = 0;
  // The workspace: the work list is read on the device so that a captured graph replays a
  // re-plan; partial LSEs follow the num_partials (read on the device) partial outputs.
  const int32_t* work_ints = nullptr;
  float* partial_out = nullptr;
  int32_t num_qo_heads = 0, num_kv_heads = 0, group_size = 0;
  float scale = 1.0f;           // resolved softmax scale
  float logits_soft_cap = 0.0f; // > 0: cap * tanh(s / cap)
  int32_t window_left = -1;
  // Streamed decode (Plan::head_parts = 2^head_parts_log2): work item rows and merge rows are
  // virtual rows v = b * P + p, head part p holding KV heads [p * Hkv / P, +Hkv / P); 0 for
  // the split kernel.
  int32_t head_parts_log2 = 0;
};

// The streamed sm_90 kernel's launch record (decode_stream_kernel.cuh): the split kernel's
// arguments plus the block geometry the host derived from StreamDecodeTiling.
struct StreamDecodeArgs {
  // K/V by TMA (kv_box_tokens 8 or 1; 0: bulk copies): 5-D maps {64 elements, token in page,
  // 64-element column block, KV head, page} with boxes of {64, kv_box_tokens, D / 64,
  // heads_per_block, 1}, landing as [head][column block][token][64] in the 128-byte swizzle
  // (StreamDecodeTiling).
  CUtensorMap k_map{}, v_map{};
  DecodeArgs d;
  int32_t kv_box_tokens = 0;
  int32_t heads_per_block = 1;  // KV heads streamed together
  int32_t consumer_warps = 4;   // StreamDecodeTiling::consumer_warps (the kernel's instance)
  bool combine = false;         // warps sharing a head combine in the block (stream_decode_combine)
  int32_t query_groups = 1;     // ceil(group / 16): query-head groups per KV head
  int32_t stages = 2;           // shared-memory ring depth
  int32_t smem_bytes = 0;       // dynamic shared memory of the launch
  bool heads_contiguous = true; // a token's heads are adjacent (NHD): one copy per token
  bool l2_evict_first = true;   // K/V copies hint L2 to evict them first (read once a step)
  int32_t producer_warps = 1;   // warps filling the ring, stage by stage in turn
  // Timing experiments only (FLASHPAGE_DECODE_ABLATE, wrong results): bit 0 = consumers skip
  // the math (the producer's streaming alone), bit 1 = no merge launch, bit 2 = per-block
  // times into the LSE output (StreamDecodeBlock::record_block_time).
  int32_t ablate = 0;
};

// Query heads one decode block serves: the M of the m16n8k16 MMA. A KV head's group is padded
// up to it (compute is free in a memory-bound kernel); groups above 16 use several blocks.
constexpr int kDecodeHeadsPerBlock = 16;

// Tile shape of the tensor-core decode kernel for head dim D (16-bit elements).
template <int kHeadDim>
struct DecodeTile {
  static constexpr int kWarps = 2;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTokensPerWarp = 16;  // one MMA K step of P.V
  static constexpr int kTileTokens = kWarps * kTokensPerWarp;
  // Pipeline depth: ~48-64 KB of K/V in flight per block, 2-3 blocks per SM.
  static constexpr int kStages = kHeadDim == 64 ? 6 : kHeadDim == 128 ? 4 : 3;
  static constexpr int kElemBytes = 2;
  static constexpr int kVecBytes = 16;  // one cp.async
  static constexpr int kChunksPerRow = kHeadDim * kElemBytes / kVecBytes;
  // +16 B per row shifts consecutive rows by 4 banks, so ldmatrix's 8 rows hit 32 banks.
  static constexpr int kRowBytes = kHeadDim * kElemBytes + kVecBytes;
  static constexpr int kTokensPerPass = kThreads / kChunksPerRow;
  static constexpr int kPasses = kTileTokens / kTokensPerPass;  // 16-byte loads per thread per tile
  static constexpr int kQBytes = kDecodeHeadsPerBlock * kRowBytes;
  static constexpr int kStageBytes = 2 * kTileTokens * kRowBytes;  // K then V
  // The epilogue reuses the stage memory for the per-warp (o, m, d) of 16 rows.
  static constexpr int kEpilogueBytes =
      kWarps * kDecodeHeadsPerBlock * (kHeadDim + 2) * int(sizeof(float));
  static constexpr int kSmemBytes = kQBytes + kStages * kStageBytes;

  static_assert(kHeadDim % 16 == 0, "head dim: a multiple of the MMA K (16)");
  static_assert(kThreads % kChunksPerRow == 0 && kTileTokens % kTokensPerPass == 0);
  static_assert(kEpilogueBytes <= kStages * kStageBytes);
  // The planner sizes its split from DecodeTiling: it must describe this block exactly.
  static_assert(kSmemBytes == DecodeTiling::smem_bytes(kHeadDim) &&
                kStages == DecodeTiling::stages(kHeadDim) &&
                kTileTokens == DecodeTiling::kTileTokens &&
                kDecodeHeadsPerBlock == DecodeTiling::kHeadsPerBlock);
};

// Instantiated for T in {__nv_bfloat16, __half}, D in {64, 128, 256} (decode_bf16.cu,
// decode_f16.cu). grid: (Hkv, work blocks, ceil(group / 16)).
template <class T, int kHeadDim>
void launch_paged_decode(const DecodeArgs& args, dim3 grid, cudaStream_t stream);

// Streamed decode (sm_90): T in {__nv_bfloat16, __half}, D in {64, 128, 256}; grid = the
// planned number of persistent blocks (one per SM). Instantiated in decode_stream.cu.
template <class T, int kHeadDim>
void launch_stream_decode(const StreamDecodeArgs& args, int grid, cudaStream_t stream);

// One instance of the streamed kernel, for cudaFuncGetAttributes: which machine code the
// build carries for the current device (stream_decode_runs_on).
const void* stream_decode_probe_kernel();

}  // namespace flashpage::cuda
