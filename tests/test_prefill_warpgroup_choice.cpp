// Host check of the Hopper prefill's choice of math warpgroups
// (src/cuda/prefill_hopper/warpgroup_choice.h): three only at head_dim 64 without causal
// masking or a window, and only for rows whose length does not pad the 192-row tiles away.
// The row cases are the shapes session 35 measured (bench/NOTES.md). Pure host code.
#include <gtest/gtest.h>

#include "cuda/prefill_hopper/warpgroup_choice.h"

namespace {

namespace hp = flashpage::cuda::prefill_hopper;

hp::WarpgroupCall call(int head_dim, bool causal, bool window) {
  hp::WarpgroupCall c;
  c.head_dim = head_dim;
  c.causal = causal;
  c.window = window;
  return c;
}

// Self-attention rows: as many keys as query tokens.
hp::WarpgroupCall rows(int64_t row_tokens, bool kv_by_tma) {
  hp::WarpgroupCall c = call(64, false, false);
  c.row_tokens = row_tokens;
  c.row_keys = row_tokens;
  c.kv_by_tma = kv_by_tma;
  return c;
}

TEST(PrefillWarpgroupChoice, ThreeOnlyForHeadDim64WithoutDiagonal) {
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, false, false)), 3);
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, true, false)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, false, true)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, true, true)), 2);
  for (int d : {128, 256})
    for (bool causal : {false, true}) EXPECT_EQ(hp::choose_math_warpgroups(call(d, causal, false)), 2);
}

TEST(PrefillWarpgroupChoice, RowLengthDecidesAtHeadDim64) {
  // Unknown rows keep three (the rule before rows were weighed).
  EXPECT_EQ(hp::choose_math_warpgroups(rows(0, true)), 3);
  EXPECT_EQ(hp::choose_math_warpgroups(rows(0, false)), 3);
  // 256 rows fill two 192-row tiles but two 128-row ones: two, however K/V arrive.
  EXPECT_EQ(hp::choose_math_warpgroups(rows(256, true)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(rows(256, false)), 2);
  // Rows shorter than a tile: 192 padded rows against 128.
  EXPECT_EQ(hp::choose_math_warpgroups(rows(100, true)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(rows(128, true)), 2);
  // 512: three by TMA (contiguous, page 16), two by cp.async (page 1).
  EXPECT_EQ(hp::choose_math_warpgroups(rows(512, true)), 3);
  EXPECT_EQ(hp::choose_math_warpgroups(rows(512, false)), 2);
  // Whole 192-row tiles and long rows: three.
  for (bool tma : {true, false}) {
    EXPECT_EQ(hp::choose_math_warpgroups(rows(768, tma)), 3);
    EXPECT_EQ(hp::choose_math_warpgroups(rows(1280, tma)), 3);
    EXPECT_EQ(hp::choose_math_warpgroups(rows(2048, tma)), 3);
    EXPECT_EQ(hp::choose_math_warpgroups(rows(8192, tma)), 3);
  }
  // By cp.async, rows of few keys stay on two even without padding (384 = 2 x 192 = 3 x 128),
  // and 640 pads 192-row tiles by a fifth: two either way.
  EXPECT_EQ(hp::choose_math_warpgroups(rows(384, true)), 3);
  EXPECT_EQ(hp::choose_math_warpgroups(rows(384, false)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(rows(640, true)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(rows(640, false)), 2);
  // 384 query rows over 4608 keys by cp.async: enough keys, no padding: three.
  hp::WarpgroupCall cached = rows(384, false);
  cached.row_keys = 4608;
  EXPECT_EQ(hp::choose_math_warpgroups(cached), 3);
  // Row length never lifts other head sizes, causal calls or windows onto three.
  for (int d : {128, 256}) {
    hp::WarpgroupCall c = rows(768, true);
    c.head_dim = d;
    EXPECT_EQ(hp::choose_math_warpgroups(c), 2);
  }
  hp::WarpgroupCall c = rows(768, true);
  c.causal = true;
  EXPECT_EQ(hp::choose_math_warpgroups(c), 2);
}

TEST(PrefillWarpgroupChoice, TileRows) {
  EXPECT_EQ(hp::m_tile_rows(2), 128);
  EXPECT_EQ(hp::m_tile_rows(3), 192);
}

}  // namespace
