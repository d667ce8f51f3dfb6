#pragma once
// Which M tile (128 packed query rows of one KV head, or 192 with three math warpgroups:
// m_tile_rows, smem_layout.h) a virtual tile index names, and the static persistent schedule:
// the grid is at most one block per SM and block b takes virtual tiles b, b + gridDim.x, ...
// The producer resolves each one and hands it to the consumer warpgroups in a tile slot
// (TileSlot, below).
//
// Rows are packed as in prefill_tc (problem_view.cuh): packed row r of a query range is token
// r / group, query head kv_head * group + r % group, so the query heads of one KV head share
// each K/V tile (GQA: K/V are read once per M tile for up to `group` heads).
//
// Query ranges:
//  - without a work list (ragged/sdpa, and paged calls on three math warpgroups): rows are cut
//    into ranges of as many tokens as an M tile has rows (128, or 192 with three math
//    warpgroups), each of `group` M tiles, issued row by row as work lists are (a row's ranges
//    read the same K/V; causal ones latest first). Rank-major (every row's first range
//    first) stays as an A/B knob (HopperArgs::row_major).
//  - with the plan's work list (paged prefill on two math warpgroups): items are <=
//    work_tile_tokens (64) tokens.
//    Items 2p and 2p+1 form pair p; when they are consecutive ranges of the same row the
//    pair is one range of up to 128 tokens (so MHA still fills 128-row M tiles), otherwise
//    each item is its own range. A pair owns 2 * ceil(64 * group / 128) subtiles. With an
//    odd group a pair that is one range needs one subtile less (group, not group + 1), and
//    only the planner's trailing pairs of single items are not one range (Plan::paired_work,
//    header int 1): the last subtile exists for those pairs only. (An empty virtual tile
//    costs the producer a round trip while the consumers wait: for MHA work lists they were
//    half of all tiles, at the end of the order.)
//
// Causal folding. Under causal masking a unit's cost falls along the unit order (latest
// query ranges first; the planner's rows longest first, each row's pairs latest first), and
// a plain stride over that order can hand some blocks mostly long tiles: with one KV head per
// L2 band and a band of fewer tiles than blocks, block b took ranks b/8.. of every band, and
// the busiest block ran ~1.4x the mean (16/16/256 8x2048). So causal schedules with at least
// two tiles per block are folded: step s of a block is unit u and then its mirror
// units - 1 - u (same subtile and head), whose costs add up to about the same for every
// step, and the blocks stride over steps.
#include <cstdint>

#include "cuda/prefill_hopper/kv_tma.h"
#ifndef FLASHPAGE_PREFILL_O_TMA
#define FLASHPAGE_PREFILL_O_TMA 0  // an experiment: O by TMA stores (o_tma.h)
#endif
#if FLASHPAGE_PREFILL_O_TMA
#include "cuda/prefill_hopper/o_tma.h"
#endif
#include "cuda/prefill_hopper/sm90_ptx.cuh"
#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/prefill_hopper/tile_order.h"
#include "cuda/prefill_tc/logits_policy.cuh"
#include "cuda/prefill_tc/problem_view.cuh"
#include "ops/workspace.h"

namespace flashpage::cuda::prefill_hopper {

using prefill_tc::PackedRows;
using prefill_tc::RowGeometry;
using prefill_tc::TileKeyRanges;

// An experiment built only with this compile definition (bench/NOTES.md, session 26):
// non-causal calls (ragged, sdpa, and paged work lists of groups that are multiples of 4) run
// on clusters of two blocks that take M tiles of one (row, KV head) in pairs and share every
// K/V tile, each block loading half of it by TMA multicast into both (cluster_pair below,
// Producer::load_slice_tma), so the K/V bytes read from L2 halve. 0 (the default) compiles
// none of it.
#ifndef FLASHPAGE_PREFILL_CLUSTER
#define FLASHPAGE_PREFILL_CLUSTER 0
#endif
constexpr bool kClusterBuild = FLASHPAGE_PREFILL_CLUSTER != 0;

// The launch arguments: prefill_tc's record (so its row geometry, key visibility and logits
// policy apply unchanged) plus the schedule's sizes.
struct HopperArgs {
  prefill_tc::KernelArgs k;
  int64_t num_virtual = 0;  // virtual tiles
  int subtiles = 1;         // virtual tiles per query range (no work list) or per pair
  int item_subtiles = 1;    // work list: M tiles an item needs, ceil(work_tile_tokens*group/128)
  int tiles_per_row = 0;    // no work list: query ranges per batch row
  int64_t units = 0;        // query ranges (no work list) or item pairs, per KV head and subtile
  int head_band = 1;        // KV heads per L2 band (split_band)
  // Query ranges without a work list: a row's ranges consecutive (row-major, the planner's
  // order for work lists; causal: latest first within the row) rather than every row's first
  // (causal: latest) range first (rank-major). The host picks it per call (prefill_hopper.cu;
  // FLASHPAGE_PREFILL_ROW_MAJOR and FLASHPAGE_PREFILL_CAUSAL_ROW_MAJOR are A/B knobs: results
  // stay correct either way).
  int row_major = 1;
  // Row-major ranges of rows only the device knows (rows_from_indptr): units are the rows'
  // ranges back to back (seek_row, below), rather than tiles_per_row per row, of which a
  // short row leaves the rest empty. On by default; FLASHPAGE_PREFILL_DENSE_RAGGED=0 is the
  // A/B knob (prefill_hopper.cu, HopperKnobs).
  int dense_rows = 0;
  // Rows of unequal range counts (rows_from_indptr) run without L2 bands when their longest
  // row's tiles over all heads are at most this many per block (schedule());
  // FLASHPAGE_PREFILL_UNBAND_TILES is the A/B knob (0: keep the host's bands). Or when the
  // longest row's K/V over all heads (its query length taken for its keys') is at most
  // unband_bytes (FLASHPAGE_PREFILL_UNBAND_MB, in MiB: 40 by default, 0 turns it off;
  // bench/NOTES.md sessions 48-49).
  int unband_tiles = 2;
  int64_t unband_bytes = 0;
  bool fold = false;        // causal: fold the units when each block gets two tiles
  // Timing experiments only (FLASHPAGE_PREFILL_ABLATE, wrong results): bit 0 = no softmax
  // (P = S as is), bit 1 = the producer copies no K/V (stale tiles, barriers as usual),
  // bit 2 = the epilogue stages O but stores nothing to global memory, bit 3 = no epilogue
  // (the Q stage is released, nothing is staged or stored), bit 4 = the producer copies no
  // Q (stale Q stages).
  int ablate = 0;
  // The consumer warpgroups take turns issuing their GEMMs (consumer_mainloop.cuh); 0 lets
  // them issue freely (FLASHPAGE_PREFILL_PINGPONG=0, an A/B knob: results stay correct).
  int pingpong = 1;
  // 1: clusters of two blocks share K/V tiles (kClusterBuild only; the host sets it for
  // non-causal calls without a window, with TMA K/V and few ghosts, whose tiles pair up:
  // tile_order.h; FLASHPAGE_PREFILL_MULTICAST=0 turns it off). Here, in what was padding
  // before kv_tma, so the default kernel's arguments keep their size.
  int cluster = 0;
  KvTma kv_tma;  // K/V tensor maps (kv_tma.h); box_rows 0: cp.async only
#if FLASHPAGE_PREFILL_O_TMA
  OTma o_tma;  // the output's map (o_tma.h); box_tokens 0: thread stores only
#endif

  // Ragged queries whose longest row the host does not know (tiles_per_row, units and
  // num_virtual are then 0): the kernel reads qo_indptr itself (schedule()), so the call
  // needs no device-to-host read and no host synchronisation.
  __host__ __device__ bool rows_from_indptr() const {
    return k.p.work_ints == nullptr && k.p.max_qo_len < 0;
  }
  // Virtual tile order (resolve_m_tile): subtile fastest, except for work lists of an odd group.
  __host__ __device__ bool subtile_fastest() const {
    return k.p.work_ints == nullptr || k.group % 2 == 0;
  }
};

// What one M tile is, with its key range and K/V tiles [n_begin, n_end) (tile n covers keys
// [n * kBlockN, (n + 1) * kBlockN)).
struct MTile {
  int b = 0, kv_head = 0;
  RowGeometry g;
  PackedRows rows;
  TileKeyRanges ranges;
  int n_begin = 0, n_end = 0;
};

// What the producer hands the consumers with each Q stage (pipeline.cuh, tile slots): the
// resolved M tile and, per consumer warpgroup, the keys all of its rows see. The producer
// runs ahead, so the consumers start a tile without the schedule's divisions and the row
// geometry's dependent global loads on their critical path. After the last tile the
// producer publishes one slot in state kDone.
struct TileSlot {
  enum State : int { kRun = 0, kEmpty = 1, kDone = 2 };  // kEmpty: no row sees a key
  MTile tile;
  prefill_tc::KeyRange wg_all[kMaxMathWarpgroups];
  int state;
};
static_assert(sizeof(TileSlot) <= kTileSlotBytes);

// Keys every row of consumer warpgroup wg's 64 rows of the tile sees (those tiles need no
// per-element masking); empty when the warpgroup has no rows.
__device__ __forceinline__ prefill_tc::KeyRange warpgroup_all_keys(const prefill_tc::KernelArgs& k,
                                                                   const MTile& t, int wg) {
  PackedRows rows = t.rows;
  rows.first += wg * kWarpgroupRows;
  rows.count = min(kWarpgroupRows, t.rows.count - wg * kWarpgroupRows);
  return rows.count > 0 ? prefill_tc::tile_key_ranges(k, t.g, rows).all : prefill_tc::KeyRange{};
}

// A block runs steps blockIdx.x, blockIdx.x + gridDim.x, ... of tiles_per_step virtual tiles
// each (2 when folded: the unit, then its mirror).
struct Schedule {
  int64_t num_virtual = 0, units = 0;
  int tiles_per_row = 0;
  bool fold = false;
  int64_t steps = 0;
  int64_t tail_units = 0;  // subtile slowest: the first unit that has the last subtile
  int head_band = 1;       // KV heads per L2 band: the host's, or all for short mixed rows
  bool dense = false;      // units are the rows' ranges back to back (HopperArgs::dense_rows)
};

// Query ranges of kRange tokens that cover `tokens` (the last one partial).
template <int kRange>
__host__ __device__ constexpr int ranges_of(int tokens) {
  return (tokens + kRange - 1) / kRange;
}

// Where a dense unit (Schedule::dense) lives: row `row`, whose ranges are units [first,
// first + its ranges).
struct RowCursor {
  int row = 0, first = 0;
};

template <int kRange>
__device__ __forceinline__ int row_ranges(const int32_t* indptr, int batch, int b) {
  return b >= 0 && b < batch ? ranges_of<kRange>(indptr[b + 1] - indptr[b]) : 0;
}

// v summed over lanes 0 .. lane (warp-collective).
__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += y;
  }
  return v;
}

// Dense units find their row through a table of the units before every seek_stride-th row
// (32 rows, one walk pass, or as many passes as keep the table within kSeekEntries), which
// the producer warps build from qo_indptr once per block (schedule(), beside the reads it
// makes anyway) and keep in shared memory. A tile's row is then one shared-memory pass
// over the table and one pass over its stride's rows (seek_row), rather than a walk over
// the batch from its nearer end, which cost batches of hundreds of rows up to 45% beside a
// cursor kept between tiles (bench/NOTES.md, sessions 48-49). kSeekEntries: smem_layout.h.
// Named barrier of the four producer warps once the table is written (ids 1 .. 6 are the
// consumers': consumer_mainloop.cuh, epilogue.cuh).
constexpr uint32_t kSeekTableBarrier = 1 + 2 * kMaxMathWarpgroups;

// The table: static shared memory, so its address is a constant (the load warpgroup has no
// register to hold one; smem_layout.h keeps it within the block's shared memory).
__device__ __forceinline__ int* seek_table() {
  __shared__ int table[kSeekEntries];
  return table;
}

// Rows per table entry for a batch: whole passes of 32 rows, as many as fit the table.
__host__ __device__ constexpr int seek_stride(int batch) {
  return 32 * ranges_of<kSeekEntries>(ranges_of<32>(batch));
}
static_assert(seek_stride(1) == 32 && seek_stride(32 * kSeekEntries) == 32 &&
              seek_stride(32 * kSeekEntries + 1) == 64 && seek_stride(9000) == 64);

// The row that holds unit `unit` (< the units of all rows), from the table: the last entry
// at or before the unit (one shared-memory pass for up to 8192 rows), then forward through
// its rows, 32 a pass (one pass for up to 8192 rows), where lane l reads the length of the
// pass's l-th row and a prefix sum over the warp finds the row. Warp-collective.
template <int kRange>
__device__ __forceinline__ RowCursor seek_row(const int32_t* indptr, int batch, int unit,
                                              int lane) {
  constexpr unsigned kAll = 0xffffffffu;
  RowCursor c;  // c.first: units before c.row
  if (batch > 32) {
    const int stride = seek_stride(batch);
    const int entries = (batch + stride - 1) / stride;
    const int* table = seek_table();
    for (int base = 0;; base += 32) {  // entry 0 is 0, so the hit is past it
      const int e = base + lane;
      const unsigned hit = __ballot_sync(kAll, e < entries ? table[e] > unit : true);
      if (hit != 0) {
        const int last = base + __ffs(hit) - 2;  // the last entry at or before the unit
        c.row = last * stride;
        c.first = table[last];
        break;
      }
    }
  }
  while (c.row < batch) {
    const int n = row_ranges<kRange>(indptr, batch, c.row + lane);
    const int walked = warp_inclusive_sum(n, lane);  // units of this pass's rows 0 .. lane
    const unsigned hit = __ballot_sync(kAll, c.first + walked > unit);  // rows ending past it
    if (hit != 0) {
      const int i = __ffs(hit) - 1;
      c.first += __shfl_sync(kAll, walked - n, i);
      c.row += i;
      return c;
    }
    c.first += __shfl_sync(kAll, walked, 31);
    c.row += 32;
  }
  return c;  // not reached for unit < the units of all rows
}

// Whether a causal schedule is folded: only when each block gets two virtual tiles (the host
// decides its L2 bands by the same rule, prefill_hopper.cu).
__host__ __device__ constexpr bool folds_at(int64_t num_virtual, int64_t grid) {
  return num_virtual >= 2 * grid;
}

// Steps that `units` units make (folded: a unit and its mirror per step).
__device__ __forceinline__ int64_t step_units(const Schedule& s, int64_t units) {
  return s.fold ? (units + 1) / 2 : units;
}
__device__ __forceinline__ int tiles_per_step(const Schedule& s) { return s.fold ? 2 : 1; }

// The cluster experiment's pair order (tile_order.h) for this call (subtiles: 1 or even, the
// host's condition).
__device__ __forceinline__ TilePairOrder pair_order(const HopperArgs& a, const Schedule& s) {
  return TilePairOrder{a.subtiles, s.units, s.tiles_per_row, a.k.p.batch_size,
                       a.k.p.num_kv_heads, s.head_band};
}

// The schedule's sizes: the host's, or derived here from qo_indptr (rows_from_indptr) and
// the work list's header. A warp-collective call (every lane gets the same result); the
// indptr reads are independent, several in flight per lane, so B = 1024 rows cost a few L2
// round trips. kRange: query tokens per range (m_tile_rows). kPairs: the steps are a
// cluster's tile pairs (cluster_pair).
template <int kRange, bool kPairs = false>
__device__ __forceinline__ Schedule schedule(const HopperArgs& a, int lane) {
  constexpr bool kWriteSeekTable = !kPairs;  // pairs are never dense
  Schedule s{a.num_virtual, a.units, a.tiles_per_row};
  s.head_band = a.head_band;
  if (a.rows_from_indptr()) {
    const int32_t* indptr = a.k.p.qo_indptr;
    const int batch = a.k.p.batch_size;
    // Pass p reads rows 32p .. 32p + 31; every stride's first pass writes the units before
    // it to seek_row's table (lane 0 of warp 0; the producer warps then meet).
    const int per_entry = seek_stride(batch) / 32;
    const bool writer = kWriteSeekTable && threadIdx.x == 0;
    int longest = 0, ranges = 0;  // ranges: warp-uniform, the units of the passes so far
#pragma unroll 4
    for (int p = 0; 32 * p < batch; ++p) {
      const int b = 32 * p + lane;
      const int len = b < batch ? indptr[b + 1] - indptr[b] : 0;
      longest = max(longest, len);
      if (writer && p % per_entry == 0) seek_table()[p / per_entry] = ranges;
      ranges += __reduce_add_sync(0xffffffffu, ranges_of<kRange>(len));
    }
    longest = __reduce_max_sync(0xffffffffu, longest);
    if constexpr (kWriteSeekTable) sm90::named_sync(kSeekTableBarrier, 128);
    s.tiles_per_row = ranges_of<kRange>(longest);
    const int64_t row_units = int64_t(s.tiles_per_row) * batch;
    // Rows of equal range counts: the dense units are the old ones (no search needed).
    s.dense = a.dense_rows != 0 && a.row_major != 0 && !kPairs && ranges < row_units;
    s.units = s.dense ? int64_t(ranges) : row_units;
    s.num_virtual = s.units * a.k.p.num_kv_heads * a.subtiles;
    // Rows of unequal range counts leave units empty (a short row's ranges past its end),
    // and in bands of a few heads the rows' costs then fall on the blocks' strides unevenly
    // (a schedule model: 8x1000+56x100 at max/mean block load 1.34 banded, 1.04 not). The
    // bands pay only where a row's tiles over all heads outlast about two tiles a block
    // (1x8192+16x512 at 32 KV heads lost 12% unbanded: its long row's K/V is reread from
    // L2 for 8 waves), so only rows that fit that run unbanded (bench/NOTES.md, sessions
    // 47-48). Rows of equal range counts (ranges == row_units) keep the host's bands.
    const int64_t row_tiles = int64_t(s.tiles_per_row) * a.k.p.num_kv_heads * a.subtiles;
    const int64_t row_bytes = int64_t(longest) * a.k.p.num_kv_heads * a.k.p.head_dim * 4;
    if (ranges < row_units &&
        (row_tiles <= int64_t(a.unband_tiles) * gridDim.x || row_bytes <= a.unband_bytes))
      s.head_band = a.k.p.num_kv_heads;
  }
  s.fold = a.fold && folds_at(s.num_virtual, gridDim.x);
  const int64_t heads = a.k.p.num_kv_heads;
  if constexpr (kPairs) {  // never folded (non-causal only)
    s.fold = false;
    s.steps = pair_order(a, s).steps();
    return s;
  }
  if (a.subtile_fastest()) {
    s.steps = step_units(s, s.units) * heads * a.subtiles;
  } else {  // an odd group's work list: the last subtile only for pairs that are not one range
    const int64_t whole = min(int64_t(a.k.p.work_ints[1]) / 2, s.units);
    s.tail_units = whole;
    s.steps = step_units(s, s.units) * heads * (a.subtiles - 1) +
              step_units(s, s.units - whole) * heads;
  }
  return s;
}

// This block's virtual tiles in order, starting from vt = -1: the tiles_per_step tiles of
// steps blockIdx.x, blockIdx.x + gridDim.x, ...; false after the last.
__device__ __forceinline__ bool next_tile(const Schedule& s, int64_t& vt) {
  const int per = tiles_per_step(s);
  if (vt < 0)
    vt = int64_t(blockIdx.x) * per;
  else if ((vt + 1) % per != 0)
    ++vt;  // the step's next tile
  else
    vt += int64_t(gridDim.x - 1) * per + 1;  // this block's next step
  return vt < s.steps * per;
}

__device__ __forceinline__ const int32_t* work_item(const HopperArgs& a, int64_t w) {
  return a.k.p.work_ints + Workspace::Impl::kHeaderInts + w * Workspace::Impl::kWorkFields;
}

// Fills t for virtual tile v (< steps * tiles_per_step); false when v names no rows (skip
// it). Block-uniform; warp-collective for dense units (lane: the calling warp's lane).
// kBlockM: rows of an M tile, also the tokens of a range without a work list.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool resolve_m_tile(const HopperArgs& a, const Schedule& sched,
                                               int64_t v, MTile& t, int lane) {
  const prefill_tc::KernelArgs& k = a.k;
  const bool mirror = sched.fold && (v & 1) != 0;  // the step's second tile
  if (sched.fold) v >>= 1;
  // Subtile fastest keeps a query range's M tiles (which read the same K/V) together in time,
  // so L2 serves their K/V after the first. Work lists with an odd group take subtile slowest
  // instead, with the last subtile for the tail pairs only (see the top of this file).
  int sub;
  int64_t rest;
  int64_t units = sched.units, unit0 = 0;  // this subtile's units: [unit0, unit0 + units)
  if (a.subtile_fastest()) {
    sub = int(v % a.subtiles);
    rest = v / a.subtiles;
  } else {
    const int64_t per_subtile = step_units(sched, units) * k.p.num_kv_heads;
    const int64_t shared = per_subtile * (a.subtiles - 1);
    if (v < shared) {
      sub = int(v / per_subtile);
      rest = v - int64_t(sub) * per_subtile;
    } else {
      sub = a.subtiles - 1;
      rest = v - shared;
      unit0 = sched.tail_units;
      units -= unit0;
    }
  }
  int64_t unit;  // query range (no work list) or pair
  split_band(rest, step_units(sched, units), k.p.num_kv_heads, sched.head_band, t.kv_head,
             unit);
  if (mirror) {
    if (units - 1 - unit == unit) return false;  // the middle unit of an odd count
    unit = units - 1 - unit;
  }
  unit += unit0;
  int q_begin = 0, q_end = 0, first = 0;
  if (k.p.work_ints != nullptr) {
    const int64_t num_work = k.p.work_ints[0];
    const int64_t w0 = 2 * unit, w1 = w0 + 1;
    if (w0 >= num_work) return false;  // the grid was sized from the host's count
    // Both items first (independent loads), then only the chosen row's geometry: an empty
    // subtile (the second of an MHA pair that is one range) is skipped after one round trip.
    const int32_t* i0 = work_item(a, w0);
    const int b0 = i0[0], begin0 = i0[1], end0 = i0[2];
    int b1 = -1, begin1 = 0, end1 = 0;
    if (w1 < num_work) {
      const int32_t* i1 = work_item(a, w1);
      b1 = i1[0];
      begin1 = i1[1];
      end1 = i1[2];
    }
    if (b1 == b0 && begin1 == end0) {  // one range of two items
      t.b = b0;
      q_begin = begin0;
      q_end = end1;
      first = sub * kBlockM;
    } else if (sub < a.item_subtiles) {
      t.b = b0;
      q_begin = begin0;
      q_end = end0;
      first = sub * kBlockM;
    } else {
      t.b = b1;  // -1 past the last item
      q_begin = begin1;
      q_end = end1;
      first = (sub - a.item_subtiles) * kBlockM;
    }
    if (t.b < 0 || t.b >= k.p.batch_size) return false;
    if (first >= (q_end - q_begin) * k.group) return false;  // no rows, even before clamping
    t.g = prefill_tc::row_geometry(k, t.b);
  } else {
    // Row-major keeps a row's ranges, which read the same K/V, together in time (as the
    // planner's work lists do); rank-major issues every row's rank r before any rank r + 1.
    // Causal ranks run latest first (they see the most keys).
    int rank;
    if (sched.dense) {
      const RowCursor c =
          seek_row<kBlockM>(k.p.qo_indptr, k.p.batch_size, int(unit), lane);
      t.b = c.row;
      rank = int(unit) - c.first;
    } else if (!a.row_major) {
      const int64_t ranges_per_rank = int64_t(k.p.batch_size);
      rank = int(unit / ranges_per_rank);
      t.b = int(unit % ranges_per_rank);
    } else {
      t.b = int(unit / sched.tiles_per_row);
      rank = int(unit - int64_t(t.b) * sched.tiles_per_row);
    }
    t.g = prefill_tc::row_geometry(k, t.b);
    // The row's ranges: its own with dense units, else the longest row's (a short row's last
    // ones are empty).
    const int ranges_here = sched.dense ? ranges_of<kBlockM>(t.g.qo_len) : sched.tiles_per_row;
    const int qt = k.causal ? ranges_here - 1 - rank : rank;
    q_begin = qt * kBlockM;
    q_end = q_begin + kBlockM;
    first = sub * kBlockM;
  }
  if (q_end > t.g.qo_len) q_end = t.g.qo_len;
  t.rows.group = k.group;
  t.rows.first = first;
  t.rows.count = min(kBlockM, (q_end - q_begin) * k.group - first);
  t.rows.q_begin = q_begin;
  t.rows.head0 = t.kv_head * k.group;
  if (t.rows.count <= 0) return false;
  t.ranges = prefill_tc::tile_key_ranges(k, t.g, t.rows);
  // Tiles outside the keys any row sees are never loaded (causal / window skip).
  if (t.ranges.any.hi > t.ranges.any.lo) {
    t.n_begin = t.ranges.any.lo / kBlockN;
    t.n_end = (t.ranges.any.hi + kBlockN - 1) / kBlockN;
  } else {
    t.n_begin = t.n_end = 0;  // no row sees a key: zeros and -inf, nothing loaded
  }
  return true;
}

// ---- clusters of two blocks (kClusterBuild, HopperArgs::cluster) ---------------------------
//
// Cluster c (blocks 2c and 2c + 1) takes steps c, c + gridDim.x / 2, ...; step p is a pair of
// M tiles of one row and KV head (tile_order.h, TilePairOrder), and the block of rank r runs
// the pair's tile r. Both tiles see the same keys (non-causal, no window), so the two blocks
// walk the same K/V tiles in the same order and each loads half of every tile into both.
// Where the pair's second tile has no rows (an odd number of ranges, a short last range),
// rank 1 runs a ghost: rank 0's tile with no rows, which loads its half of the K/V, computes
// on zero queries and stores nothing. Where the first has none, neither has the second, and
// both blocks skip the step.
// (With cluster dims (2, 1, 1) over a 1-D grid, blocks 2c and 2c + 1 form cluster c, and
// a block's rank is blockIdx.x & 1.)
__device__ __forceinline__ bool next_pair(const Schedule& s, int64_t& p) {
  const int64_t clusters = gridDim.x / 2;
  p = p < 0 ? int64_t(blockIdx.x / 2) : p + clusters;
  return p < s.steps;
}

template <int kBlockM, int kBlockN>
__device__ __forceinline__ bool cluster_pair(const HopperArgs& a, const Schedule& sched,
                                             int64_t p, int rank, MTile& t) {
  int64_t lead, mine;  // the virtual tiles of rank 0 and of this block (-1: none)
  pair_order(a, sched).tiles(p, rank, lead, mine);
  // The pairs' units are never dense (schedule), so no walk needs the lane.
  if (rank != 0 && mine >= 0 && resolve_m_tile<kBlockM, kBlockN>(a, sched, mine, t, 0))
    return true;
  if (!resolve_m_tile<kBlockM, kBlockN>(a, sched, lead, t, 0)) return false;
  if (rank != 0) t.rows.count = 0;  // a ghost
  return true;
}

}  // namespace flashpage::cuda::prefill_hopper
