// Host check of the Hopper prefill's tile-order index math (src/cuda/prefill_hopper/
// tile_order.h): bands of KV heads, and the cluster experiment's pairs of M tiles, which two
// blocks must agree on exactly (a pair whose tiles do not share a row and KV head would feed
// one block the other's K/V). Pure host code.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/prefill_hopper/tile_order.h"

namespace {

namespace hp = flashpage::cuda::prefill_hopper;

TEST(PrefillTileOrder, BandRestInvertsSplitBand) {
  for (int heads = 1; heads <= 9; ++heads)
    for (int band = 1; band <= heads; ++band)
      for (int64_t units = 1; units <= 7; ++units)
        for (int64_t rest = 0; rest < heads * units; ++rest) {
          int head = -1;
          int64_t unit = -1;
          hp::split_band(rest, units, heads, band, head, unit);
          ASSERT_TRUE(head >= 0 && head < heads && unit >= 0 && unit < units)
              << "rest " << rest << " heads " << heads << " band " << band;
          ASSERT_EQ(hp::band_rest(head, unit, units, heads, band), rest);
        }
}

// Every virtual tile of the no-work-list order belongs to exactly one (pair, rank), the two
// tiles of a pair have one KV head and one row, and rank 1 is without a tile only beside a
// row's last range when the row has an odd number of them.
TEST(PrefillTileOrder, ClusterPairsCoverEveryTileOnce) {
  for (int subtiles : {1, 2, 4, 8})
    for (int heads = 1; heads <= 6; ++heads)
      for (int band = 1; band <= heads; ++band)
        for (int batch = 1; batch <= 4; ++batch)
          for (int tiles_per_row = 1; tiles_per_row <= 5; ++tiles_per_row) {
            const int64_t units = int64_t(tiles_per_row) * batch;
            const hp::TilePairOrder order{subtiles, units, tiles_per_row, batch, heads, band};
            const int64_t tiles = units * heads * subtiles;
            SCOPED_TRACE(testing::Message() << "subtiles " << subtiles << " heads " << heads
                                            << " band " << band << " batch " << batch
                                            << " ranges " << tiles_per_row);
            // (head, unit, sub) of virtual tile v (scheduler.cuh, resolve_m_tile).
            const auto locate = [&](int64_t v, int& head, int64_t& unit, int& sub) {
              sub = int(v % subtiles);
              hp::split_band(v / subtiles, units, heads, band, head, unit);
            };
            std::vector<int> owners(size_t(tiles), 0);
            for (int64_t p = 0; p < order.steps(); ++p) {
              int64_t lead0 = -1, mine0 = -1, lead1 = -1, mine1 = -1;
              order.tiles(p, 0, lead0, mine0);
              order.tiles(p, 1, lead1, mine1);
              ASSERT_EQ(lead0, lead1) << "pair " << p;
              ASSERT_EQ(mine0, lead0) << "pair " << p;
              ASSERT_TRUE(lead0 >= 0 && lead0 < tiles) << "pair " << p;
              ++owners[size_t(lead0)];
              int h0, s0;
              int64_t u0;
              locate(lead0, h0, u0, s0);
              if (mine1 < 0) {
                // No second tile: MHA, the last range of a row with an odd number of them.
                EXPECT_EQ(subtiles, 1);
                EXPECT_EQ(tiles_per_row % 2, 1);
                EXPECT_EQ(u0 % tiles_per_row, tiles_per_row - 1);
                continue;
              }
              ASSERT_LT(mine1, tiles) << "pair " << p;
              ++owners[size_t(mine1)];
              int h1, s1;
              int64_t u1;
              locate(mine1, h1, u1, s1);
              EXPECT_EQ(h1, h0) << "pair " << p;
              EXPECT_EQ(u1 / tiles_per_row, u0 / tiles_per_row) << "pair " << p;  // the row
              if (subtiles % 2 == 0) {
                EXPECT_EQ(u1, u0);
                EXPECT_EQ(s1, s0 + 1);
                EXPECT_EQ(s0 % 2, 0);
              } else {
                EXPECT_EQ(u1, u0 + 1);
                EXPECT_EQ(u0 % tiles_per_row % 2, 0);
              }
            }
            for (int64_t v = 0; v < tiles; ++v) ASSERT_EQ(owners[size_t(v)], 1) << "tile " << v;
          }
}

}  // namespace
