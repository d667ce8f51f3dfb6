#pragma once
// How many math warpgroups the Hopper prefill runs a call on (smem_layout.h): three, with
// 192-row M tiles, at head_dim 64 without causal masking or a window where the rows' length
// does not waste the gain in padding (below); two everywhere else.
//
// At head_dim 64 a warpgroup's softmax takes as long as its GEMMs, so with two warpgroups the
// softmaxes overlap each other and the tensor cores idle; a third fills the gaps
// (FlashAttention-3's 192 x 128 tiles). Measured (bench/NOTES.md, session 33, H100, 32/32/64,
// three against two, non-causal): 1 x 8192 +9-14% (ragged, contiguous and paged 16); with a
// range's last, partial tile run by the warpgroups that have rows in it (the others idle,
// consumer_mainloop.cuh), 8 x 2048 +7-8%, 64 x 512 +2-5%, 16 x 1024 level. Causal: 5-19%
// slower in call 1 (a 192-row diagonal tile computes up to 192 masked keys of a row where
// 128-row tiles compute up to 128); with each warpgroup skipping the K/V tiles its rows do
// not see (call 4), 1 x 8192 and 8 x 2048 0-3% faster but 16 x 1024 5-11% and 64 x 512
// 21-23% slower. So causal calls and windows (the same diagonal bands) stay on two. A paged
// call on three leaves its work list, whose 64-token items would pair into 128-token ranges
// (35-50% slower), and has the kernel cut its rows into 192-token ranges as for ragged
// queries (prefill_hopper.cu).
//
// Padding (session 35, H100, 32/32/64 and 16/16/64 non-causal, three against two in one
// binary): a row of L query tokens fills ceil(L / rows) M tiles, and a tile's idle rows still
// cost most of a tile. 128 x 256 (two 192-row tiles for 256 rows) ran 1.4-1.55x faster on
// two, contiguous and page 1. Where K/V come by cp.async (pages under 16 tokens: no TMA
// boxes, kv_tma.h) the load warpgroup, cut to 32 registers on three, spills its row
// addresses, and three gains less: page 1 64 x 512 ran 9-10% faster on two while contiguous
// and page 16 stayed faster on three; 16 x 1024 level; 48 x 768, 8 x 2048 and 1 x 8192 7-16%
// faster on three. So three where its padded rows, divided by its gain at whole tiles, undercut
// two's: 1.15 with K/V by TMA (row lengths 256-8192 imply 1.04-1.21). By cp.async the gain
// grows with the keys a tile walks (its first K/V stages wait on the spilling load warpgroup):
// 320 and 384 rows ran 5-6% faster on two with no padding either way, 640 13%, 768 and 1280
// 6-16% faster on three, 896 and 1024 level; so by cp.async three needs rows of 768+ keys and
// its padding under a gain of 1.10 (session 35, calls 1-4). Rows pad by query tokens whatever
// the group: weighing a group's packed rows instead (GQA 4: 256 tokens = 1024 rows, 1152 in
// 192-row tiles) predicted 32/8/64 128 x 256 level, and it ran 1.40x faster on two (call 5).
//
// Plain host C++: tests/test_prefill_warpgroup_choice.cpp.
#include <cstdint>

#include "cuda/prefill_hopper/smem_layout.h"

namespace flashpage::cuda::prefill_hopper {

struct WarpgroupCall {
  int head_dim = 128;
  bool causal = false;
  bool window = false;     // window_left >= 0
  int64_t row_tokens = 0;  // query tokens per row: exact when uniform, the mean of ragged
                           // rows (the host does not know each); 0: unknown
  int64_t row_keys = 0;    // keys per row, the same way
  bool kv_by_tma = true;   // K/V tiles by TMA boxes (kv_tma.h box_rows > 0)
};

// Three math warpgroups' speed over two at whole tiles, by how K/V arrive (measured above),
// and the keys per row below which cp.async K/V stay on two.
inline constexpr double kThreeGainTma = 1.15;
inline constexpr double kThreeGainCpAsync = 1.10;
inline constexpr int64_t kThreeMinKeysCpAsync = 768;

// Query rows a row of `tokens` occupies in M tiles of `tile_rows`.
inline int64_t padded_rows(int64_t tokens, int tile_rows) {
  return (tokens + tile_rows - 1) / tile_rows * tile_rows;
}

inline int choose_math_warpgroups(const WarpgroupCall& c) {
  if (c.head_dim != 64 || c.causal || c.window) return 2;
  if (!c.kv_by_tma && c.row_keys > 0 && c.row_keys < kThreeMinKeysCpAsync) return 2;
  if (c.row_tokens <= 0) return 3;
  const double gain = c.kv_by_tma ? kThreeGainTma : kThreeGainCpAsync;
  return double(padded_rows(c.row_tokens, m_tile_rows(3))) <
                 gain * double(padded_rows(c.row_tokens, m_tile_rows(2)))
             ? 3
             : 2;
}

}  // namespace flashpage::cuda::prefill_hopper
