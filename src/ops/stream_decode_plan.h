#pragma once
// The work list of the streamed CUDA decode kernel: persistent blocks, each given an equal
// share of the step's tokens. Rows are laid end to end and cut at the share boundaries, so a
// long row spreads over many blocks and short rows pack into one; cut rows (and, where
// several warps share a KV head, every row) write partials that the split merge combines.
#include <cstdint>
#include <vector>

#include "ops/workspace.h"

namespace flashpage {

struct StreamDecodeWork {
  std::vector<WorkItem> items;         // grouped by block, in the order each block runs them
  std::vector<int32_t> merge_indptr;   // [B+1]: row b's partial slots
  std::vector<int32_t> block_indptr;   // [blocks+1]: block k runs items [k], [k+1])
  int64_t num_partials = 0;
};

// lengths: row lengths; blocks: persistent blocks of the launch (one per SM); max_partials:
// how many partial slots the workspace holds (rows are not cut when cuts would need more).
StreamDecodeWork plan_stream_decode(const std::vector<int64_t>& lengths, int64_t num_kv_heads,
                                    int64_t head_dim, int64_t blocks,
                                    int64_t max_partials);

}  // namespace flashpage
