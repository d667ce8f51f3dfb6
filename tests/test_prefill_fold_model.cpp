// Host check of the causal-fold schedule model (src/cuda/prefill_hopper/fold_model.h): its
// per-block loads, computed over runs of equal-cost tiles, against a tile-by-tile walk of the
// kernel's virtual tile order restated here (scheduler.cuh: subtile fastest, then the head
// inside an L2 band of heads, then the unit = rank * batch + row, bands slowest; folded, step
// w names unit u and then its mirror units - 1 - u and goes to block w mod grid). Pure host code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/prefill_hopper/fold_model.h"

namespace {

namespace hp = flashpage::cuda::prefill_hopper;

std::vector<double> walk_loads(const hp::FoldModelShape& s, bool fold) {
  std::vector<double> loads(size_t(s.grid), 0.0);
  const int64_t units = s.tiles_per_row * s.batch;
  const int64_t step_units = fold ? (units + 1) / 2 : units;
  const int64_t steps = step_units * s.kv_heads * s.subtiles;
  for (int64_t w = 0; w < steps; ++w) {
    const int64_t rest = w / s.subtiles;
    const int64_t band_items = s.head_band * step_units;
    const int64_t band = rest / band_items, within = rest % band_items;
    const int64_t heads_here = std::min(s.head_band, s.kv_heads - band * s.head_band);
    const int64_t unit = within / heads_here;
    double cost = hp::range_cost(s, unit / s.batch);
    if (fold && units - 1 - unit != unit) cost += hp::range_cost(s, (units - 1 - unit) / s.batch);
    loads[size_t(w % s.grid)] += cost;
  }
  return loads;
}

TEST(PrefillFoldModel, RunsMatchTileByTileWalk) {
  std::mt19937 rng(12345);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int i = 0; i < 300; ++i) {
    hp::FoldModelShape s;
    s.batch = pick(1, 40);
    s.qo_len = pick(1, 3000);
    s.kv_len = s.qo_len + (pick(0, 1) ? pick(0, 5000) : 0);
    s.tiles_per_row = (s.qo_len + 127) / 128;
    s.kv_heads = pick(1, 32);
    s.head_band = pick(1, s.kv_heads);
    s.subtiles = pick(1, 8);
    s.grid = pick(1, 140);
    s.block_n = pick(0, 1) ? 64 : 128;
    for (bool fold : {false, true}) {
      const auto fast = hp::block_loads(s, fold), slow = walk_loads(s, fold);
      ASSERT_EQ(fast.size(), slow.size());
      for (size_t b = 0; b < fast.size(); ++b)
        ASSERT_NEAR(fast[b], slow[b], 1e-6 * (1.0 + slow[b]))
            << "case " << i << " fold " << fold << " block " << b << " batch " << s.batch
            << " qo " << s.qo_len << " heads " << s.kv_heads << "/" << s.head_band
            << " subtiles " << s.subtiles << " grid " << s.grid;
      // fold_pays' allocation-free maximum, on a reused scratch, is the walk's busiest block.
      std::vector<double> scratch(3, 7.0);
      const double most = *std::max_element(slow.begin(), slow.end());
      ASSERT_NEAR(hp::busiest_load(s, fold, scratch), most, 1e-6 * (1.0 + most)) << "case " << i;
    }
  }
}

// The model against session 12's in-run A/B on the H200 (bench/NOTES.md): folding gained
// 39% at 16/16/256 8x2048 causal (bands of one KV head, 128 tiles each for 132 blocks) and
// 9% at 32/32/128 1x8192 causal, and lost 4% at 32/32/128 16x1024 causal and 2% at
// 32/32/128 8x2048 causal, where the plain order was already balanced.
hp::FoldModelShape causal_self(int64_t batch, int64_t len, int64_t kv_heads, int64_t band,
                               int64_t subtiles, int64_t block_n) {
  hp::FoldModelShape s;
  s.batch = batch;
  s.qo_len = s.kv_len = len;
  s.tiles_per_row = len / 128;
  s.kv_heads = kv_heads;
  s.head_band = band;
  s.subtiles = subtiles;
  s.grid = 132;
  s.block_n = block_n;
  return s;
}

TEST(PrefillFoldModel, AgreesWithMeasuredDirection) {
  EXPECT_TRUE(hp::fold_pays(causal_self(8, 2048, 16, 1, 1, 64)));     // 16/16/256 8x2048
  EXPECT_TRUE(hp::fold_pays(causal_self(16, 1024, 16, 1, 1, 64)));    // 16/16/256 16x1024
  EXPECT_TRUE(hp::fold_pays(causal_self(1, 8192, 32, 6, 1, 128)));    // 32/32/128 1x8192
  EXPECT_FALSE(hp::fold_pays(causal_self(16, 1024, 32, 3, 1, 128)));  // 32/32/128 16x1024
  EXPECT_FALSE(hp::fold_pays(causal_self(8, 2048, 32, 3, 1, 128)));   // 32/32/128 8x2048
}

}  // namespace
