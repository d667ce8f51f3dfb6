#pragma once
// The work list of the streamed CUDA decode kernel: persistent blocks, each given an equal
// share of the step's tokens. Rows are laid end to end and cut at the share boundaries, so a
// long row spreads over many blocks and short rows pack into one; cut rows write partials
// that the split merge combines: one per piece where warps sharing a KV head combine their
// states in the block (stream_decode_combine), else one per piece and warp, for every row.
//
// Work rows are *virtual rows*: row b's KV heads split into P head parts, virtual row
// b * P + p holding KV heads [p * Hkv / P, (p + 1) * Hkv / P). Where whole virtual rows,
// longest first onto the least loaded block, leave no block much fuller than an equal share
// (one row per block, or e.g. two rows on most blocks at 256 x 1024), none is cut and nothing
// is merged (the DRAM is shared, so the few blocks left idle early cost no bandwidth:
// bench/NOTES.md, sessions 17, 24 and 29).
#include <cstdint>
#include <vector>

#include "ops/decode_tiling.h"
#include "ops/workspace.h"

namespace flashpage {

struct StreamDecodeWork {
  std::vector<WorkItem> items;         // grouped by block, in the order each block runs them
  std::vector<int32_t> merge_indptr;   // [B * P + 1]: virtual row v's partial slots
  std::vector<int32_t> block_indptr;   // [blocks+1]: block k runs items [k], [k+1])
  int64_t num_partials = 0;
};

// lengths: row lengths; blocks: persistent blocks of the launch (one per SM); max_partials:
// how many partial slots the workspace holds (rows are not cut when cuts would need more);
// head_parts: P (stream_decode_head_parts); uncut_pct: how much fuller than an equal share
// (in percent) the fullest block of whole rows may be for the rows to run uncut (0: always
// cut to equal shares); warp_partials: partials each piece writes (1 where warps combine in
// the block; else the warps per head, and every row is merged); cut_tokens: rows are cut only
// at multiples of this from their start, the launch's TMA box (StreamDecodeTiling::
// planned_box_tokens): a piece starting or ending inside a box reads all of it, so unaligned
// cuts read each shared box twice (B = 1: ~7 tokens of ~250 per block).
StreamDecodeWork plan_stream_decode(const std::vector<int64_t>& lengths, int64_t num_kv_heads,
                                    int64_t blocks, int64_t max_partials, int64_t head_parts = 1,
                                    int64_t uncut_pct = 0, int64_t warp_partials = 1,
                                    int64_t cut_tokens = 1);

// The plan's block records (Workspace::Impl, kBlockRecordInts each, one per block): block
// k's item range {begin, end}, the first page of its first item's batch row
// (kv_indptr[row / head_parts]) and that item, so the kernel starts from one round trip
// instead of three dependent ones. A block without items gets {begin, begin, 0, 0, 0...}.
// kv_indptr: the host page table's [B + 1] (fixed by the rows' lengths, which the plan is
// made from).
std::vector<int32_t> stream_decode_block_records(const StreamDecodeWork& work,
                                                 const int32_t* kv_indptr, int64_t head_parts);

// P for a batch: the largest power of two dividing Hkv with B * P <= blocks whose parts
// keep the blocks' consumer warps (`wide`: StreamDecodeTiling::consumer_warps, 8 for blocks
// of 8, 4 or 2 KV heads at head_dim <= 128, 4 at 256) or, not `wide`, their KV heads (the
// policy before session 27), and only if the B * P virtual rows then fill the blocks to
// within the uncut tolerance (else rows are cut anyway and P stays 1); only where pages hold
// whole 8-token TMA boxes (page 1's single-token copies of fewer heads are smaller, and
// page 1 is bound by their count: parts of one head at head_dim 256, 512-byte copies, ran
// 14-23% longer on an H100, bench/NOTES.md session 38). Measured on an H100 (session 24):
// parts that halved the blocks' heads *and warps* (8 -> 4) made 64 x 512 3.6-4.4% faster but
// random-length batches 2% slower; wide blocks of 4 heads keep 8 warps (2 per head).
// FLASHPAGE_DECODE_HEAD_PARTS=2 allows parts down to 4 KV heads whatever the warps; =3 also
// gives parts to rows that are cut anyway (fewer partials per merged row); =0 makes P 1. It
// depends only on what a captured graph keeps across re-plans of one batch size, never on
// the lengths. The blocks are StreamDecodeTiling::block's for the group size and page size.
int64_t stream_decode_head_parts(int64_t batch, int64_t num_kv_heads, int64_t head_dim,
                                 int64_t group_size, int64_t page_size, int64_t blocks, bool wide);
// The planner's uncut tolerance: FLASHPAGE_DECODE_UNCUT_PCT, 10 by default (0: off).
int64_t stream_decode_uncut_pct();
// Where rows are cut (plan_stream_decode's cut_tokens): at whole TMA boxes of the page size's
// planned boxes; FLASHPAGE_DECODE_CUT_ALIGN=0: at any token (the planner before session 45).
int64_t stream_decode_cut_tokens(int64_t page_size);
// On by default (session 27; measured in-run on an H100: 64 x 512 +6-11%, bench/NOTES.md),
// FLASHPAGE_DECODE_COMBINE=0 turns off all three: warps sharing a KV
// head combine their states in the block (one partial per piece, uncut rows not merged),
// blocks of 2 or 4 KV heads get 8 warps (StreamDecodeTiling::consumer_warps `wide`), and
// head parts keep the blocks' warps. Off: each warp writes its own partial, blocks of fewer
// than 8 heads have 4 warps, parts keep the blocks' heads (the kernel of before).
bool stream_decode_combine();
// On by default (session 37, measured in-run: bench/NOTES.md). With the combine, a block of
// a head part of one KV head runs 8 consumer warps where its ring keeps 3 stages
// (StreamDecodeTiling::block), so head parts may go down to one head (32/8/128 at B = 16:
// 128 uncut rows, no merge); unparted one-head blocks (Hkv = 1, or odd Hkv) keep 4
// (sessions 42-43).
// FLASHPAGE_DECODE_ONE_HEAD_WIDE=0: 4 warps, parts of at least 2 heads (the default before
// session 37).
bool stream_decode_one_head_wide();
// The block shape of a streamed launch over `head_parts` parts of `num_kv_heads` KV heads
// (the process's combine and one-head knobs, the boxes planned for the page size): the one
// derivation the planner (plan.cpp) and the launcher (decode.cu) share, so they cannot
// disagree.
StreamDecodeTiling::Block stream_decode_block(int64_t num_kv_heads, int64_t head_parts,
                                              int64_t head_dim, int64_t group_size,
                                              int64_t page_size);

}  // namespace flashpage
