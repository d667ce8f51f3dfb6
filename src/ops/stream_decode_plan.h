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
  std::vector<int32_t> block_indptr;   // [lists+1]: block k runs items [k], [k+1])
  int64_t num_partials = 0;
};

// The tail of the work: about `percent` of the tokens in `lists` short lists, given to
// blocks launched after the persistent ones. SMs do not stream at one rate (on the H200 a
// fixed set of 24 SMs runs ~25% faster than the rest: bench/NOTES.md, session 16); the
// hardware hands each tail block to the first SM that frees up, so the fast ones take more.
struct StreamDecodeTail {
  int64_t percent = 0;
  int64_t lists = 0;  // 0: no tail
};

// lengths: row lengths; blocks: persistent blocks of the launch (one per SM); max_partials:
// how many partial slots the workspace holds (rows are not cut, and there is no tail, when
// cuts would need more). The launch's grid is block_indptr.size() - 1.
StreamDecodeWork plan_stream_decode(const std::vector<int64_t>& lengths, int64_t num_kv_heads,
                                    int64_t head_dim, int64_t blocks, int64_t max_partials,
                                    const StreamDecodeTail& tail = {});

}  // namespace flashpage
