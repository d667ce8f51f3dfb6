#pragma once
// The work list of the streamed CUDA decode kernel: persistent blocks, each given an equal
// share of the step's tokens. Rows are laid end to end and cut at the share boundaries, so a
// long row spreads over many blocks and short rows pack into one; cut rows (and, where
// several warps share a KV head, every row) write partials that the split merge combines.
// The end of every share is cut off again into tail lists that the blocks claim at run time.
#include <array>
#include <cstdint>
#include <vector>

#include "ops/decode_tiling.h"
#include "ops/workspace.h"

namespace flashpage {

struct StreamDecodeWork {
  // The blocks' own items grouped by block, each block's in the order it runs them; then the
  // tail items, in the order the blocks claim them (first-level tails of every block, then
  // the second level).
  std::vector<WorkItem> items;
  std::vector<int32_t> merge_indptr;  // [B+1]: row b's partial slots
  // [blocks+1]: block k runs items [k], [k+1]) of its own; [blocks] is the first tail item.
  std::vector<int32_t> block_indptr;
  int64_t tail_items = 0;
  int64_t num_partials = 0;
};

// lengths: row lengths; blocks: persistent blocks of the launch (one per SM); max_partials:
// how many partial slots the workspace holds (rows are not cut when cuts would need more);
// tail_percent: the tails' sizes in percent of a share (StreamDecodeTiling::kTailPercent; 0
// leaves a level out).
StreamDecodeWork plan_stream_decode(
    const std::vector<int64_t>& lengths, int64_t num_kv_heads, int64_t head_dim, int64_t blocks,
    int64_t max_partials,
    const std::array<int, StreamDecodeTiling::kTailLevels>& tail_percent =
        {StreamDecodeTiling::kTailPercent[0], StreamDecodeTiling::kTailPercent[1]});

}  // namespace flashpage
