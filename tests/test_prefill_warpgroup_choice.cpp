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

hp::WarpgroupCall rows(int64_t row_tokens, int64_t row_keys, bool kv_by_tma) {
  hp::WarpgroupCall c = call(64, false, false);
  c.row_tokens = row_tokens;
  c.row_keys = row_keys;
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
  struct Case {
    int64_t tokens, keys;
    bool tma;
    int expected;
    const char* why;
  };
  const Case cases[] = {
      {0, 0, true, 3, "unknown rows keep three (the rule before rows were weighed)"},
      {0, 0, false, 3, "unknown rows keep three"},
      {256, 256, true, 2, "256 rows fill two 192-row tiles but two 128-row ones"},
      {256, 256, false, 2, "256 rows, by cp.async"},
      {100, 100, true, 2, "shorter than a tile: 192 padded rows against 128"},
      {128, 128, true, 2, "one whole 128-row tile against a 192-row one"},
      {512, 512, true, 3, "512 by TMA (contiguous, page 16)"},
      {512, 512, false, 2, "512 by cp.async (page 1)"},
      {768, 768, true, 3, "whole 192-row tiles"},
      {768, 768, false, 3, "whole 192-row tiles, 768 keys by cp.async"},
      {1280, 1280, true, 3, "long rows"},
      {1280, 1280, false, 3, "long rows by cp.async"},
      {2048, 2048, true, 3, "long rows"},
      {2048, 2048, false, 3, "long rows by cp.async"},
      {8192, 8192, true, 3, "long rows"},
      {8192, 8192, false, 3, "long rows by cp.async"},
      {384, 384, true, 3, "384 = 2 x 192 = 3 x 128 by TMA"},
      {384, 384, false, 2, "by cp.async, rows of few keys stay on two without padding"},
      {640, 640, true, 2, "640 pads 192-row tiles by a fifth"},
      {640, 640, false, 2, "640 by cp.async"},
      {384, 4608, false, 3, "384 query rows over 4608 keys by cp.async: enough keys"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(hp::choose_math_warpgroups(rows(c.tokens, c.keys, c.tma)), c.expected)
        << c.tokens << " tokens, " << c.keys << " keys, tma " << c.tma << ": " << c.why;
  // Row length never lifts other head sizes, causal calls or windows onto three.
  for (int d : {128, 256}) {
    hp::WarpgroupCall c = rows(768, 768, true);
    c.head_dim = d;
    EXPECT_EQ(hp::choose_math_warpgroups(c), 2);
  }
  hp::WarpgroupCall c = rows(768, 768, true);
  c.causal = true;
  EXPECT_EQ(hp::choose_math_warpgroups(c), 2);
}

TEST(PrefillWarpgroupChoice, TileRows) {
  EXPECT_EQ(hp::m_tile_rows(2), 128);
  EXPECT_EQ(hp::m_tile_rows(3), 192);
}

}  // namespace
