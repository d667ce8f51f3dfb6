// Host check of the Hopper prefill's choice of math warpgroups
// (src/cuda/prefill_hopper/warpgroup_choice.h): three only at head_dim 64 without causal
// masking or a window. Pure host code.
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

TEST(PrefillWarpgroupChoice, ThreeOnlyForHeadDim64WithoutDiagonal) {
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, false, false)), 3);
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, true, false)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, false, true)), 2);
  EXPECT_EQ(hp::choose_math_warpgroups(call(64, true, true)), 2);
  for (int d : {128, 256})
    for (bool causal : {false, true}) EXPECT_EQ(hp::choose_math_warpgroups(call(d, causal, false)), 2);
}

TEST(PrefillWarpgroupChoice, TileRows) {
  EXPECT_EQ(hp::m_tile_rows(2), 128);
  EXPECT_EQ(hp::m_tile_rows(3), 192);
}

}  // namespace
