#pragma once
// Facts about the CUDA decode kernels that the host planner needs, kept free of CUDA headers.
// What device code calls avoids std::min/max: those are host functions, and nvcc turns a
// run-time call of one in device code into a trap.
// The kernels compile against the same functions (src/cuda/decode_args.h and
// decode_stream_kernel.cuh check their tiles against these), so planner and kernel cannot
// disagree.
#include <algorithm>
#include <cstdint>

namespace flashpage {

// The split-KV decode kernel of sm_80+ (decode_kernel.cuh): 2 warps, cp.async, one block per
// (work item, KV head, group of <= 16 query heads), several blocks per SM.
struct DecodeTiling {
  static constexpr int kHeadsPerBlock = 16;  // the M of one m16n8k16 MMA
  static constexpr int kTileTokens = 32;     // K/V tokens per pipeline stage
  static constexpr int kElemBytes = 2;       // bf16 / f16 pages
  static constexpr int kRowPadBytes = 16;    // shifts rows by 4 banks for ldmatrix
  static constexpr int kSmemPerSm = 228 * 1024;    // Hopper
  static constexpr int kReservedPerBlock = 1024;   // the driver's per-block shared reserve

  static constexpr int stages(int head_dim) {
    return head_dim <= 64 ? 6 : head_dim <= 128 ? 4 : 3;  // ~48-64 KB of K/V in flight
  }
  static constexpr int row_bytes(int head_dim) { return head_dim * kElemBytes + kRowPadBytes; }
  static constexpr int smem_bytes(int head_dim) {
    return kHeadsPerBlock * row_bytes(head_dim) +
           stages(head_dim) * 2 * kTileTokens * row_bytes(head_dim);
  }
  static constexpr int blocks_per_sm(int head_dim) {
    return std::max(1, kSmemPerSm / (smem_bytes(head_dim) + kReservedPerBlock));
  }
};

// The streamed decode kernel of sm_90 (decode_stream_kernel.cuh): one persistent block per
// SM walks its share of the work list. A producer warp streams whole token rows of
// `heads_per_block` KV heads (one bulk copy per token and K/V, any page size) into a ring of
// shared-memory stages; consumer warps each own one KV head's 16 query-head rows (MMA M) and
// a 16-token slice of every stage (consumer_warps). Work items cover every KV head of a
// (virtual) row's token range (a virtual row: one of Plan::head_parts parts of a row's KV
// heads); the block walks an item's head blocks and query-head groups as consecutive
// sub-units.
struct StreamDecodeTiling {
  static constexpr int kRowsPerWarp = 16;     // query heads of one KV head per MMA M tile
  static constexpr int kSliceTokens = 16;     // tokens per consumer warp per stage (MMA K)
  static constexpr int kElemBytes = 2;
  // +16 B per token row shifts rows by 4 banks (conflict-free ldmatrix). The price, measured
  // (bench/NOTES.md): bulk copies into rows that start 16 B off a 128 B line cost the L2 extra
  // requests (19% "hits", 6% less DRAM throughput than 128 B-aligned rows); 32 B padding was
  // worse (10% hits plus 2-way conflicts). The TMA boxes below are aligned and conflict-free;
  // padded rows remain for the bulk-copy fallback.
  static constexpr int kRowPadBytes = 16;
  static constexpr int kMinConsumerWarps = 4;
  static constexpr int kMaxStages = 8;
  static constexpr int kSmemBudget = 227 * 1024;  // Hopper's per-block dynamic maximum
  static constexpr int kBarrierBytes = 256;       // mbarriers at the front of shared memory

  // KV heads whose rows one block streams together: the largest of 8/4/2/1 dividing Hkv,
  // at most 4 at head_dim 256 (register file: one warp per head holds 16 x 256 f32).
  static constexpr int heads_per_block(int num_kv_heads, int head_dim) {
    const int cap = head_dim > 128 ? 4 : 8;
    for (int h = cap; h > 1; h /= 2)
      if (num_kv_heads % h == 0) return h;
    return 1;
  }
  // Consumer warps of a block of `heads` KV heads: one per head from 8 heads. Below 8, at
  // head_dim <= 128 and `wide` (with the in-block combine), still 8: 2, 4 or 8 warps per head
  // split each stage's tokens and fold their states together in shared memory at the end of
  // a sub-unit (the combine buffer), so a block of 4 heads may stream as fast as one of 8
  // (blocks of 4 warps measured ~2% slower, NOTES.md session 24). Otherwise 4 (head_dim 256:
  // the register file). A block of one head gets 8 warps only with `one_head_wide` (block()
  // decides it; session 36), else 4 (FLASHPAGE_DECODE_ONE_HEAD_WIDE=0).
  static constexpr int consumer_warps(int heads, int head_dim, bool wide,
                                      bool one_head_wide = false) {
    if (heads >= 8) return heads;
    return wide && head_dim <= 128 && (heads >= 2 || one_head_wide) ? 8 : kMinConsumerWarps;
  }
  static constexpr int kMaxWarpsPerHead = 8;
  static constexpr int warps_per_head(int heads, int warps) { return warps / heads; }
  // The block a launch runs for parts of `part_heads` KV heads, and the partials each piece
  // of a row writes (one per warp of a head unless they combine in the block). The planner
  // and the launcher both derive it here.
  struct Block {
    int heads, warps;
    bool combine;
    constexpr int warp_partials() const { return combine ? 1 : warps_per_head(heads, warps); }
  };
  // `combine`: the in-block combine is on (stream_decode_combine). A block keeps it only
  // where its buffer leaves the ring 3 stages or all it would have without it: measured on an
  // H100 (bench/NOTES.md, session 28), 16/2/256 at page 1 (2 heads on 4 warps, single-token
  // boxes) lost a stage to the buffer (3 -> 2) and ran 5-9% slower than with per-warp
  // partials. "Without it" counts the fallback's ring too (4 warps, per-warp partials): at
  // head_dim 128 with single-token boxes, 2-head blocks (16/2/128) and 4-head blocks of
  // groups 12-16 have 2 stages on 8 warps but 5 on 4, and ran 14-23% faster on 4 (session 42,
  // H100, 16/2/128 page 1). box_tokens: what planned_box_tokens gives for the page size, so
  // that planner and launcher agree whatever the driver does with the tensor maps.
  // `one_head_wide` (stream_decode_one_head_wide): a block of one KV head may run 8 warps
  // (8 slices of a 128-token stage), so that a batch of B rows can take P = Hkv parts of one
  // head each and fill the SMs uncut (32/8/128 at B = 16: 128 rows, no merge), where 4 warps
  // would stream ~2% slower. Only where that ring keeps 3 stages with the buffer, judged on
  // the planned boxes (at head_dim 128: boxes of 8 and groups up to 8, not single-token boxes,
  // whose 128-token stages are 96 KB; at 64 always). Where the driver refuses the maps, the
  // bulk-copy ring of such a block may have 2 stages (groups 6-8 at head_dim 128).
  static constexpr Block block(int part_heads, int head_dim, int group_size, int box_tokens,
                               bool combine, bool one_head_wide = false) {
    const int heads = heads_per_block(part_heads, head_dim);
    const Block fallback{heads, consumer_warps(heads, head_dim, false), false};
    if (!combine) return fallback;
    const bool one_wide =
        one_head_wide && heads == 1 && stages(1, 8, head_dim, group_size, box_tokens, true) >= 3;
    const int warps = consumer_warps(heads, head_dim, true, one_wide);
    const int with = stages(heads, warps, head_dim, group_size, box_tokens, true);
    const int without =
        std::max(stages(heads, warps, head_dim, group_size, box_tokens, false),
                 stages(heads, fallback.warps, head_dim, group_size, box_tokens, false));
    return with >= std::min(without, 3) ? Block{heads, warps, true} : fallback;
  }
  // Producer warps beside the consumers: up to 4, but 2 beside 8 consumer warps above head_dim
  // 64 (320 threads leave those kernels the ~170 registers they use; at head_dim 64 the
  // 8-consumer kernel uses 126, which 384 threads leave it). Never more than the ring's
  // stages: a producer then never runs a whole ring ahead of the consumers' releases.
  static constexpr int max_producer_warps(int consumer_warps, int head_dim) {
    return consumer_warps >= 8 && head_dim > 64 ? 2 : 4;
  }
  // The producer warps the ring asks for (the default; FLASHPAGE_DECODE_PRODUCERS=P fixes P):
  // 2 (page 1 at 16/2/256 +29% over 1, 8-token boxes +0-2.5%: session 16), but one fewer
  // than the ring's stages where the boxes are single tokens. Those stages are bound by their
  // copy count (one box per token and K/V), and a ring of 4-6 stages beside 4 consumer warps
  // streams faster with more warps issuing them: measured in-run on an H100 (bench/NOTES.md,
  // session 40), page 1 at 8/1/128 (256-byte copies, 4 stages) +22-33% on 3 producers,
  // 32/4/128 (1 KB, 6 stages) +2-6% on 4, while 16/2/256 (1 KB, 3 stages) ran 1-5% slower on
  // 3; 8-token boxes gained nothing. Session 41 repeated it against 2 in one run (H100):
  // 8/1/128 +17-24%, 32/4/128 +2-4%.
  static constexpr int producer_warps_by_ring(int stages, int box_tokens) {
    return box_tokens == 1 && stages - 1 > 2 ? stages - 1 : 2;
  }
  // The producer warps a launch gets for `requested` (FLASHPAGE_DECODE_PRODUCERS; 0, the
  // default: producer_warps_by_ring) and a ring of `stages` filled in boxes of `box_tokens`.
  static constexpr int producer_warps(int requested, int warps, int head_dim, int stages,
                                      int box_tokens) {
    if (requested == 0) requested = producer_warps_by_ring(stages, box_tokens);
    return std::clamp(requested, 1, std::min(max_producer_warps(warps, head_dim), stages));
  }
  static constexpr int stage_tokens(int heads, int warps) {
    return kSliceTokens * warps_per_head(heads, warps);
  }
  static constexpr int query_rows(int group_size) {
    return group_size < kRowsPerWarp ? group_size : kRowsPerWarp;
  }
  static constexpr int query_groups(int group_size) {
    return (group_size + kRowsPerWarp - 1) / kRowsPerWarp;
  }
  static constexpr int token_row_bytes(int heads, int head_dim) {
    return heads * head_dim * kElemBytes + kRowPadBytes;
  }
  static constexpr int query_row_bytes(int head_dim) {
    return head_dim * kElemBytes + kRowPadBytes;
  }
  static constexpr int query_bytes(int heads, int head_dim, int group_size) {
    return heads * query_rows(group_size) * query_row_bytes(head_dim);
  }
  // Where warps share a head and combine in the block, the states of all but its first
  // warp: f32 O rows of D + 8 floats (8 rows of a fragment then fall in different banks),
  // then the rows' max and denominator, padded to whole 128-byte lines.
  static constexpr int combine_row_floats(int head_dim) { return head_dim + 8; }
  static constexpr int combine_bytes(int heads, int warps, int head_dim, int group_size,
                                     bool combine) {
    if (!combine) return 0;
    const int states = heads * (warps_per_head(heads, warps) - 1) * query_rows(group_size);
    return (states * (combine_row_floats(head_dim) + 2) * 4 + 127) / 128 * 128;
  }
  // K/V by TMA (decode_stream_kernel.cuh): boxes of `box_tokens` tokens (8 where the page
  // size is a multiple of 8, else 1) x the block's heads land as
  // [box][head][64-element column block][box_tokens rows of 128 B] in the 128-byte swizzle:
  // rows 128 B-aligned (no padding, so no L2 penalty) and conflict-free for ldmatrix, because
  // 8 consecutive tokens of one head and column block sit in rows of 8 different swizzle
  // phases (address bits 7-9). Boxes of 8 tokens are 8 rows per (head, block), so the phase is
  // the token; single-token boxes are spaced by an odd number of rows, so it advances by an
  // odd step per token. A sub-unit's stages start on a box boundary; the kernel masks the
  // keys before its range.
  static constexpr int kTmaBoxTokens = 8;
  // The boxes a launch asks for: 8 tokens where pages hold whole boxes, else single tokens
  // (the launch falls back to bulk copies, box 0, where the driver refuses the maps).
  static constexpr int planned_box_tokens(int64_t page_size) {
    return page_size % kTmaBoxTokens == 0 ? kTmaBoxTokens : 1;
  }
  static constexpr int kSwizzleAtomBytes = 1024;  // the swizzle repeats every 8 rows of 128 B
  static constexpr int kSwizzleRowBytes = 128;
  static constexpr int tma_rows_per_token(int heads, int head_dim) {
    return heads * head_dim * kElemBytes / kSwizzleRowBytes;
  }
  // Bytes from one box to the next in a stage.
  static constexpr int tma_box_stride(int heads, int head_dim, int box_tokens) {
    const int rows = tma_rows_per_token(heads, head_dim);
    return box_tokens == 1 ? (rows % 2 == 1 ? rows : rows + 1) * kSwizzleRowBytes
                           : box_tokens * rows * kSwizzleRowBytes;
  }
  static constexpr int tma_box_bytes(int heads, int head_dim, int box_tokens) {
    return box_tokens * tma_rows_per_token(heads, head_dim) * kSwizzleRowBytes;
  }
  // The ring, for K/V in padded rows (box_tokens 0: bulk copies) or in TMA boxes. Bytes of
  // one stage, K then V:
  static constexpr int stage_bytes(int heads, int warps, int head_dim, int box_tokens) {
    return box_tokens == 0
               ? 2 * stage_tokens(heads, warps) * token_row_bytes(heads, head_dim)
               : 2 * (stage_tokens(heads, warps) / box_tokens) *
                     tma_box_stride(heads, head_dim, box_tokens);
  }
  // What precedes the stages: barriers, the query slot, the combine buffer and, for TMA
  // boxes, one swizzle atom (the dynamic shared memory is only 16-byte aligned; the kernel
  // rounds the stages' start up to an atom).
  static constexpr int fixed_bytes(int heads, int warps, int head_dim, int group_size,
                                   int box_tokens, bool combine) {
    return kBarrierBytes + query_bytes(heads, head_dim, group_size) +
           combine_bytes(heads, warps, head_dim, group_size, combine) +
           (box_tokens == 0 ? 0 : kSwizzleAtomBytes);
  }
  static constexpr int stages(int heads, int warps, int head_dim, int group_size, int box_tokens,
                              bool combine) {
    const int room =
        kSmemBudget - fixed_bytes(heads, warps, head_dim, group_size, box_tokens, combine);
    const int fit = room / stage_bytes(heads, warps, head_dim, box_tokens);
    return fit < kMaxStages ? fit : kMaxStages;
  }
  static constexpr int smem_bytes(int heads, int warps, int head_dim, int group_size,
                                  int box_tokens, bool combine, int stages) {
    return fixed_bytes(heads, warps, head_dim, group_size, box_tokens, combine) +
           stages * stage_bytes(heads, warps, head_dim, box_tokens);
  }
  // Shared by the planner's cost model: what an item costs beyond streaming its tokens
  // (query load, epilogue), in tokens of one sub-unit.
  static constexpr int kItemOverheadTokens = 16;
  // Pieces shorter than this are not cut off a row (a partial costs more than it balances).
  static constexpr int kMinPieceTokens = 64;
};

// Two stages at least for the largest query slot, padded rows and single-token boxes (the
// largest stages); tests/test_stream_decode_plan.cpp checks every block shape.
static_assert(StreamDecodeTiling::stages(8, 8, 128, 16, 0, true) >= 2 &&
              StreamDecodeTiling::stages(4, 8, 128, 16, 0, true) >= 2 &&
              StreamDecodeTiling::stages(4, 4, 256, 16, 0, true) >= 2 &&
              StreamDecodeTiling::stages(1, 4, 256, 16, 0, true) >= 2 &&
              StreamDecodeTiling::stages(8, 8, 64, 16, 0, true) >= 2);
static_assert(StreamDecodeTiling::stages(8, 8, 128, 16, 1, true) >= 2 &&
              StreamDecodeTiling::stages(4, 8, 128, 16, 1, true) >= 2 &&
              StreamDecodeTiling::stages(4, 4, 256, 16, 1, true) >= 2 &&
              StreamDecodeTiling::stages(1, 4, 256, 16, 1, true) >= 2 &&
              StreamDecodeTiling::stages(8, 8, 64, 16, 1, true) >= 2);

}  // namespace flashpage
