#pragma once
// How many math warpgroups the Hopper prefill runs a call on (smem_layout.h): three, with
// 192-row M tiles, at head_dim 64 where they pay; two everywhere else.
//
// At head_dim 64 a warpgroup's softmax takes as long as its GEMMs, so with two warpgroups the
// softmaxes overlap each other and the tensor cores idle; a third fills the gaps
// (FlashAttention-3's 192 x 128 tiles). Measured (bench/NOTES.md, session 33, H100, 32/32/64
// ragged, three against two): non-causal 1 x 8192 +9-14%, 8 x 2048 level (-3 to +1% in
// call 2; +7% in call 1 against a slow baseline pass), 16 x 1024 level and 64 x 512 -3%,
// where rows of 2048, 1024 and 512 tokens pad to 2112, 1152 and 576 rows (3%, 12.5% and 11%
// more than 128-row tiles); causal 5-19% slower (a 192-row diagonal tile computes more
// masked keys); paged 16 on the planner's work list 35-50% slower (its 64-token items pair
// into 128-token ranges, 2/3 of a 192-row tile). So three only without causal masking or a
// window, and only where 192-token ranges pad a row by at most 2% more than 128-token ones;
// a paged call that takes them leaves its work list and has the kernel cut its rows into
// 192-token ranges as for ragged queries (prefill_hopper.cu).
//
// Plain host C++: tests/test_prefill_warpgroup_choice.cpp.
#include <cstdint>

#include "cuda/prefill_hopper/smem_layout.h"

namespace flashpage::cuda::prefill_hopper {

struct WarpgroupCall {
  int head_dim = 128;
  bool causal = false;
  bool window = false;     // window_left >= 0
  int64_t row_tokens = 0;  // the longest row, or the mean where only the device knows it
};

// Query rows a row of `tokens` tokens takes in ranges of `range` tokens.
inline int64_t padded_rows(int64_t tokens, int64_t range) {
  return (tokens + range - 1) / range * range;
}

// max_padding_percent: how many more rows 192-token ranges may pad than 128-token ones.
inline int choose_math_warpgroups(const WarpgroupCall& c, int64_t max_padding_percent = 2) {
  if (c.head_dim != 64 || c.causal || c.window) return 2;
  const int64_t three = padded_rows(c.row_tokens, m_tile_rows(3));
  const int64_t two = padded_rows(c.row_tokens, m_tile_rows(2));
  return 100 * three <= (100 + max_padding_percent) * two ? 3 : 2;
}

}  // namespace flashpage::cuda::prefill_hopper
