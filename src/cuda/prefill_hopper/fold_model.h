#pragma once
// Whether folding a causal schedule (scheduler.cuh, "Causal folding") shortens it, from a model
// of the static persistent schedule: each block's load is the sum of its tiles' costs, a
// tile costing its K/V tiles (in 128-key units) plus kTileOverhead for its boundary (first
// S GEMM, epilogue), and the kernel ends with the busiest block.
//
// Folding removes the stride patterns that can hand a block mostly long tiles (up to 1.4x the
// mean load, measured 16/16/256 8x2048), but its steps all cost about the same, so the last
// partial round of steps costs a whole step where the plain order ends on the shortest
// tiles: about 3% at 2^k steps over 132 blocks, measured -2 to -4% where the plain order was
// already balanced (bench/NOTES.md, session 12). The host folds the rank-major ragged/sdpa
// order (FLASHPAGE_PREFILL_CAUSAL_ROW_MAJOR=0; row-major, the default since session 31,
// always folds) only where the model says it pays.
//
// Plain host C++ (no CUDA): the tests check it against a tile-by-tile count.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/prefill_hopper/smem_layout.h"

namespace flashpage::cuda::prefill_hopper {

// The causal rank-major no-work-list schedule (ragged / sdpa) of uniform rows (non-causal ranges run
// row-major and never fold): virtual tile
// v = ((band start + rank * batch * heads_in_band + b * heads_in_band + head) * subtiles + sub),
// ranks latest first (scheduler.cuh, resolve_m_tile and split_band).
struct FoldModelShape {
  int64_t tiles_per_row = 0;  // 128-token query ranges of a row
  int64_t batch = 0;
  int64_t kv_heads = 0, head_band = 1, subtiles = 1;
  int64_t grid = 1;                // blocks
  int64_t qo_len = 0, kv_len = 0;  // per row; causal bottom-right
  int64_t block_n = 128;           // keys per K/V tile
};

constexpr double kTileOverhead = 1.5;  // a tile's boundary, in 128-key K/V tiles
// Query tokens per range: causal calls, the only ones folded, run on two math warpgroups
// (warpgroup_choice.h), whose ranges are one M tile's rows.
constexpr int64_t kRangeTokens = m_tile_rows(2);

// Cost of a row's query range of rank r (range tiles_per_row - 1 - r).
inline double range_cost(const FoldModelShape& s, int64_t rank) {
  const int64_t qt = s.tiles_per_row - 1 - rank;
  const int64_t q_end = std::min((qt + 1) * kRangeTokens, s.qo_len);
  const int64_t keys = std::clamp<int64_t>(s.kv_len - s.qo_len + q_end, 0, s.kv_len);
  const int64_t tiles = (keys + s.block_n - 1) / s.block_n;
  return double(tiles * s.block_n) / 128.0 + kTileOverhead;
}

// Each block's load: v (or, folded, step w) goes to block v mod grid. Whole runs of equal
// cost are added at once (a difference array over the blocks), so the cost is
// O(bands * ranks + grid), not O(tiles). Block b's load is the returned share of every block
// plus diff[0] + ... + diff[b]; `diff` is the caller's (grid + 1 values, overwritten), so a
// caller per launch can keep one and allocate nothing.
inline double accumulate_loads(const FoldModelShape& s, bool fold, std::vector<double>& diff) {
  const int64_t g = std::max<int64_t>(s.grid, 1);
  diff.assign(size_t(g) + 1, 0.0);
  double everyone = 0.0;
  auto add = [&](int64_t start, int64_t len, double x) {  // positions [start, start + len)
    everyone += x * double(len / g);
    const int64_t rem = len % g, st = start % g;
    if (rem == 0) return;
    diff[size_t(st)] += x;
    if (st + rem <= g) {
      diff[size_t(st + rem)] -= x;
    } else {
      diff[size_t(g)] -= x;
      diff[0] += x;
      diff[size_t(st + rem - g)] -= x;
    }
  };
  const int64_t units = s.tiles_per_row * s.batch;
  const int64_t step_units = fold ? (units + 1) / 2 : units;
  for (int64_t first = 0; first < s.kv_heads; first += s.head_band) {
    const int64_t hh = std::min(s.head_band, s.kv_heads - first);
    const int64_t band_start = first * step_units;  // in (head, unit) pairs
    for (int64_t r = 0; r < s.tiles_per_row; ++r) {
      const int64_t lo = r * s.batch, hi = std::min((r + 1) * s.batch, step_units);
      if (lo >= hi) break;
      const double own = range_cost(s, r);
      if (!fold) {
        add((band_start + lo * hh) * s.subtiles, (hi - lo) * hh * s.subtiles, own);
        continue;
      }
      // Unit u pairs with units - 1 - u (rank tiles_per_row - 1 - r); the middle unit of an
      // odd count is alone.
      const double pair = own + range_cost(s, s.tiles_per_row - 1 - r);
      const int64_t middle = units % 2 == 1 ? units / 2 : -1;
      if (middle >= lo && middle < hi) {
        add((band_start + lo * hh) * s.subtiles, (middle - lo) * hh * s.subtiles, pair);
        add((band_start + middle * hh) * s.subtiles, hh * s.subtiles, own);
        add((band_start + (middle + 1) * hh) * s.subtiles, (hi - middle - 1) * hh * s.subtiles, pair);
      } else {
        add((band_start + lo * hh) * s.subtiles, (hi - lo) * hh * s.subtiles, pair);
      }
    }
  }
  return everyone;
}

// Every block's load.
inline std::vector<double> block_loads(const FoldModelShape& s, bool fold) {
  std::vector<double> diff;
  const double everyone = accumulate_loads(s, fold, diff);
  std::vector<double> loads(diff.size() - 1);
  double run = 0.0;
  for (size_t b = 0; b < loads.size(); ++b) {
    run += diff[b];
    loads[b] = everyone + run;
  }
  return loads;
}

// The busiest block's load, in the caller's scratch `diff`.
inline double busiest_load(const FoldModelShape& s, bool fold, std::vector<double>& diff) {
  const double everyone = accumulate_loads(s, fold, diff);
  double run = 0.0, most = -1.0e300;
  for (size_t b = 0; b + 1 < diff.size(); ++b) {
    run += diff[b];
    most = std::max(most, run);
  }
  return everyone + most;
}

// Fold when the busiest block's load drops by more than 1%. Called once per ragged/sdpa
// causal launch: a per-thread scratch, so no allocation after a thread's first call.
inline bool fold_pays(const FoldModelShape& s) {
  thread_local std::vector<double> diff;
  const double folded = busiest_load(s, true, diff);
  return folded < 0.99 * busiest_load(s, false, diff);
}

}  // namespace flashpage::cuda::prefill_hopper
