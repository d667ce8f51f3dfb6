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

// The wg3d128 experiment's build: head_dim 128 follows head_dim 64's rule, 256 stays on two.
TEST(PrefillWarpgroupChoice, HeadDim128OnThreeInTheExperiment) {
  for (int d : {64, 128, 256})
    for (bool causal : {false, true})
      for (bool window : {false, true}) {
        hp::WarpgroupCall c = call(d, causal, window);
        c.head_dim_128_on_three = true;
        EXPECT_EQ(hp::choose_math_warpgroups(c), d <= 128 && !causal && !window ? 3 : 2)
            << d << " " << causal << " " << window;
      }
}

TEST(PrefillWarpgroupChoice, TileRows) {
  EXPECT_EQ(hp::m_tile_rows(2), 128);
  EXPECT_EQ(hp::m_tile_rows(3), 192);
  // Key tiles: 64 where 160 registers must hold O at head_dim 128 (three warpgroups) or 256.
  EXPECT_EQ(hp::kv_tile_rows(64, 3), 128);
  EXPECT_EQ(hp::kv_tile_rows(128, 2), 128);
  EXPECT_EQ(hp::kv_tile_rows(128, 3), 64);
  EXPECT_EQ(hp::kv_tile_rows(256, 2), 64);
  EXPECT_EQ(hp::kv_slice_rows(128, 3), 16);
}

}  // namespace
