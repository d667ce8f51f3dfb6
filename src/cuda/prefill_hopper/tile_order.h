#pragma once
// The index math of the Hopper prefill's virtual tile order (scheduler.cuh) that needs no
// device: L2 bands of KV heads, and the cluster experiment's pairs of M tiles. Host and device
// code, so tests/test_prefill_tile_order.cpp checks it on the host.
#include <cstdint>

#include "cuda/prefill_hopper/smem_layout.h"  // FP_HOPPER_HD

namespace flashpage::cuda::prefill_hopper {

// Virtual tiles run in bands of `band` KV heads: a band's tiles (every query range of its
// heads) come before the next band's. The blocks running at one time then read the K/V of at
// most a band of heads, which the host sizes to stay in L2; without bands an MHA prefill
// whose K/V exceed L2 read every head in every wave, from DRAM. Inside a band the head is
// fastest, so the order of the units (latest-first causal tiles, the planner's longest-first
// pairs) still holds. rest < heads * units.
FP_HOPPER_HD void split_band(int64_t rest, int64_t units, int heads, int band, int& head,
                             int64_t& unit) {
  const int64_t band_items = int64_t(band) * units;
  const int64_t b = rest / band_items;
  const int64_t within = rest - b * band_items;
  const int first = int(b) * band;
  const int heads_here = band < heads - first ? band : heads - first;
  head = first + int(within % heads_here);
  unit = within / heads_here;
}

// The inverse of split_band: the `rest` that names (head, unit).
FP_HOPPER_HD int64_t band_rest(int head, int64_t unit, int64_t units, int heads, int band) {
  const int first = head / band * band;
  const int heads_here = band < heads - first ? band : heads - first;
  return int64_t(first) * units + unit * heads_here + (head - first);
}

// ---- the cluster experiment's pairs (FLASHPAGE_PREFILL_CLUSTER; scheduler.cuh, cluster_pair) --
//
// Virtual tile v = rest * subtiles + sub, rest from split_band over `units` (query ranges of
// 128 tokens, row-major: unit = b * tiles_per_row + range, without a work list; the work
// list's item pairs with one). A pair is two M tiles of one row and KV head: with an even
// number of subtiles, virtual tiles 2p and 2p + 1 (subtiles 2i and 2i + 1 of one unit; with a
// work list the host also requires an even number of subtiles per item, a group that is a
// multiple of 4, so both are of one item); with one subtile (MHA, no work list), ranges 2j
// and 2j + 1 of a row, ordered like the units (bands of heads, head fastest).
struct TilePairOrder {
  int subtiles = 1;  // 1 or even
  int64_t units = 0;
  int tiles_per_row = 0, batch = 0;  // one subtile: units = tiles_per_row * batch
  int heads = 1, band = 1;

  FP_HOPPER_HD int pairs_per_row() const { return (tiles_per_row + 1) / 2; }
  // Pairs in all.
  FP_HOPPER_HD int64_t steps() const {
    return subtiles % 2 == 0 ? units * heads * (subtiles / 2)
                             : int64_t(pairs_per_row()) * batch * heads;
  }
  // Pair p's virtual tiles: rank 0's (lead) and rank `rank`'s (mine; -1 where the row has no
  // such range: rank 1 beside the last range of an odd number).
  FP_HOPPER_HD void tiles(int64_t p, int rank, int64_t& lead, int64_t& mine) const {
    if (subtiles % 2 == 0) {
      lead = 2 * p;
      mine = lead + rank;
      return;
    }
    int head;
    int64_t pair_unit;
    split_band(p, int64_t(pairs_per_row()) * batch, heads, band, head, pair_unit);
    const int64_t b = pair_unit / pairs_per_row();
    const int range = 2 * int(pair_unit - b * pairs_per_row()) + rank;
    const int64_t unit = b * tiles_per_row + range;
    lead = band_rest(head, unit - rank, units, heads, band);
    mine = range < tiles_per_row ? band_rest(head, unit, units, heads, band) : -1;
  }
};

}  // namespace flashpage::cuda::prefill_hopper
