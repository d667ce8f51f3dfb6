// Host check of the Hopper prefill's choice of math warpgroups
// (src/cuda/prefill_hopper/warpgroup_choice.h): three only at head_dim 64, non-causal, without
// a window, and only where 192-token ranges pad a row by at most 2% more than
// 128-token ones. Pure host code.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/prefill_hopper/warpgroup_choice.h"

namespace {

namespace hp = flashpage::cuda::prefill_hopper;

hp::WarpgroupCall call64(int64_t tokens) {
  hp::WarpgroupCall c;
  c.head_dim = 64;
  c.row_tokens = tokens;
  return c;
}

TEST(PrefillWarpgroupChoice, PaddingDecidesAtHeadDim64) {
  // 192-token ranges that pad a row no more than 2% beyond 128-token ones: 192 and 576
  // (fewer rows than 256 and 640), 384, 3072, 8192 (8256 against 8192: 0.8%), 20000.
  for (int64_t t : {192, 384, 576, 3072, 8192, 20000})
    EXPECT_EQ(hp::choose_math_warpgroups(call64(t)), 3) << t;
  // Those that pad more: 1 and 100 (192 rows against 128), 128, 256, 512 (576 against 512:
  // 12.5%), 640 (768 against 640), 1024 (1152 against 1024), 2048 (2112: 3.1%), 4096.
  for (int64_t t : {1, 100, 128, 256, 512, 640, 1024, 2048, 4096})
    EXPECT_EQ(hp::choose_math_warpgroups(call64(t)), 2) << t;
  // 6400: 6528 against 6400 is 2% exactly, the limit.
  EXPECT_EQ(hp::choose_math_warpgroups(call64(6400)), 3);
}

TEST(PrefillWarpgroupChoice, TwoOtherwise) {
  for (int d : {128, 256}) {
    hp::WarpgroupCall c = call64(8192);
    c.head_dim = d;
    EXPECT_EQ(hp::choose_math_warpgroups(c), 2) << d;
  }
  hp::WarpgroupCall c = call64(8192);
  c.causal = true;
  EXPECT_EQ(hp::choose_math_warpgroups(c), 2);
  c = call64(8192);
  c.window = true;
  EXPECT_EQ(hp::choose_math_warpgroups(c), 2);
}

TEST(PrefillWarpgroupChoice, TileRows) {
  EXPECT_EQ(hp::m_tile_rows(2), 128);
  EXPECT_EQ(hp::m_tile_rows(3), 192);
  EXPECT_EQ(hp::padded_rows(0, 192), 0);
  EXPECT_EQ(hp::padded_rows(193, 192), 384);
}

}  // namespace
