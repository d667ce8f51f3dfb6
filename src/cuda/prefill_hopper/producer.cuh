#pragma once
// The load warpgroup: copies each M tile's Q and its K/V tiles into shared memory in the
// swizzled layout of smem_layout.h, and signals the consumers through mbarriers (the "full"
// barrier completes when every producer thread has arrived and its copies have landed).
//
// K/V slices whose rows are all keys and whose pages hold whole TMA boxes go by TMA
// (kv_tma.h, load_slice_tma); Q, the partial last slice of a row's keys, small pages and
// unusual strides go by 16-byte cp.async (cp.async.mbarrier.arrive.noinc), which gathers
// rows token by token (pages of any size, NHD or HND, ragged rows, any 16-byte aligned
// strides, the packed GQA query rows) and zero-fills rows past the end. A tile is cut into four
// slices (32 rows; 16 of a 64-key K/V tile; Producer::kSplitRoles says which warp takes
// which): for each, lane l resolves the address of the slice's row l (one page-table read
// per row, issued one tile ahead so its latency hides behind the previous tile's wait), then
// the warp copies four rows per pass, 8 lanes per row, each lane taking every 8th 16-byte
// chunk (whole 128-byte lines per row, coalesced), the row offset broadcast with a shuffle.
//
// Rows past the end (keys no row of the tile sees, query rows past the tile) are zero-filled:
// S stays finite there (it is masked to -inf anyway) and P * V never meets stale NaNs.
#include <cstdint>

#include "cuda/prefill_hopper/kv_tma.h"
#include "cuda/prefill_hopper/pipeline.cuh"
#include "cuda/prefill_hopper/scheduler.cuh"
#include "cuda/prefill_hopper/sm90_ptx.cuh"
#include "cuda/prefill_hopper/smem_layout.h"

namespace flashpage::cuda::prefill_hopper {

// Copies the warp's kRows rows [row0, row0 + kRows) (row0 a multiple of 8) of a tile of
// `tile_rows` rows. Lane l < kRows gives the address of row row0 + l (nullptr: zero-fill it).
//
// The producer is one warp per scheduler running a dependent chain, so its instruction count
// per copy sets how fast tiles arrive (ncu: ~26 instructions per cp.async here before, half of
// the kernel's instructions, and the consumers waiting on full barriers). Per row it now
// shuffles one pointer and picks the zero-fill size once; per 16-byte chunk it adds constants:
// row0 & 7 == 0, so the swizzle of row row0 + 4 * pass + sub_row depends only on the pass's
// parity and the lane, and is computed once.
template <class T, int kHeadDim, int kRows>
__device__ __forceinline__ void copy_warp_rows(uint32_t tile, int tile_rows, int row0,
                                               const char* lane_row, const char* fallback,
                                               int lane) {
  using Cfg = TileConfig<kHeadDim>;
  constexpr int kLanesPerRow = 8;
  constexpr int kRowsPerPass = 32 / kLanesPerRow;
  constexpr int kChunksPerLane = Cfg::kChunks / kLanesPerRow;
  const int sub_row = lane / kLanesPerRow;
  const int lane_chunk = lane % kLanesPerRow;
  const uint32_t lane_base = tile + uint32_t((row0 + sub_row) * kSwizzleRowBytes);
  const uint32_t swizzle[2] = {uint32_t((lane_chunk ^ sub_row) << 4),
                               uint32_t((lane_chunk ^ (sub_row + kRowsPerPass)) << 4)};
  const uint32_t col_block_bytes = uint32_t(tile_rows * kSwizzleRowBytes);
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const char* row = reinterpret_cast<const char*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<uintptr_t>(lane_row), pass * kRowsPerPass + sub_row));
    const bool valid = row != nullptr;
    const char* src = (valid ? row : fallback) + lane_chunk * kChunkBytes;
    const uint32_t dst = lane_base + uint32_t(pass * kRowsPerPass * kSwizzleRowBytes) + swizzle[pass & 1];
#pragma unroll
    for (int cc = 0; cc < kChunksPerLane; ++cc)
      sm90::cp_async_16(dst + uint32_t(cc) * col_block_bytes, src + cc * kLanesPerRow * kChunkBytes, valid);
  }
}

// Marks this thread's part of a tile as sent: the full barrier gets the thread's arrival
// once its copies have landed. The consumers fence the proxies after waiting
// (sm90::fence_proxy_async). Building with FLASHPAGE_HOPPER_PRODUCER_FENCE=1 instead waits for
// the copies here and fences on the writing side before a plain arrival: slower (one tile in
// flight per thread), for ruling the cross-proxy ordering out when chasing a wrong result.
__device__ __forceinline__ void signal_full(uint32_t bar) {
#if defined(FLASHPAGE_HOPPER_PRODUCER_FENCE) && FLASHPAGE_HOPPER_PRODUCER_FENCE
  sm90::cp_async_wait_all();
  sm90::fence_proxy_async();
  sm90::mbarrier_arrive(bar);
#else
  sm90::cp_async_arrive_noinc(bar);
#endif
}

// Element offset (< 0: none) -> the row's address for copy_warp_rows.
template <class T>
__device__ __forceinline__ const char* row_address(const T* base, int64_t offset) {
  return offset < 0 ? nullptr : reinterpret_cast<const char*>(base + offset);
}

// Where one lane's K/V row of a tile lives: the page (or batch row) and the slot in it.
struct KvRowSource {
  int32_t unit = -1;  // page id / batch row; -1: past the end, zero-fill
  int32_t slot = 0;

  __device__ __forceinline__ int64_t offset(int64_t stride_unit, int64_t stride_token,
                                            int64_t head_offset) const {
    return unit < 0 ? int64_t(-1)
                    : int64_t(unit) * stride_unit + int64_t(slot) * stride_token + head_offset;
  }
};

// kPairs: the block runs its tiles of a cluster's pairs (scheduler.cuh, cluster_pair) and
// shares K/V tiles with the peer block: a kernel of its own (kernel.cuh), since a runtime
// branch between the two loops spilled the load warpgroup's registers.
template <class T, int kHeadDim, bool kPairs = false, int kMathWarpgroups = 2>
struct Producer {
  using Cfg = TileConfig<kHeadDim, kMathWarpgroups>;
  static constexpr int kBlockN = Cfg::kBlockN;
  // Rows of a slice: a Q or K/V tile is four slices (one a warp, or two with kSplitRoles).
  static constexpr int kQRowsPerWarp = Cfg::kBlockM / kProducerWarps;
  static constexpr int kKvRowsPerWarp = Cfg::kKvSliceRows;
  static_assert((kQRowsPerWarp == 32 || kQRowsPerWarp == 48) &&
                (kKvRowsPerWarp == 32 || kKvRowsPerWarp == 16));
  // Split roles (two math warpgroups, no clusters): warps 0-1 copy only K/V and warps 2-3
  // only resolve tiles, copy Q and publish, each warp taking two of the four slices. Q then
  // runs up to kQStages tiles ahead instead of waiting behind the last tile's K/V issue (the
  // consumers' q_full wait, ~7-10% of their time at 64 x 512: bench/NOTES.md sessions 11,
  // 25), and the K/V warps go from a tile's last V straight to the next tile's first K. Every
  // thread arrives once per slice, so the barriers' counts stay those of pipeline.cuh.
  // A kernel experiment (bench/experiments.sh, split=FLASHPAGE_PREFILL_SPLIT_ROLES=1): no
  // GPU has run it yet (bench/NOTES.md, session 52); the default stays four warps that each
  // do everything, the same program as before this switch (its SASS differs only in integer
  // instruction forms and registers: no load, store, barrier or math instruction).
#if defined(FLASHPAGE_PREFILL_SPLIT_ROLES) && FLASHPAGE_PREFILL_SPLIT_ROLES
  static constexpr bool kSplitRoles = !kPairs && kMathWarpgroups == 2;
#else
  static constexpr bool kSplitRoles = false;
#endif
  static constexpr int kSlicesPerWarp = kSplitRoles ? 2 : 1;
  struct KvSources {
    KvRowSource at[kSlicesPerWarp];
  };

  const HopperArgs& a;
  const SmemPlan<kHeadDim, kMathWarpgroups>& s;
  int warp, lane;

  // The warp's first slice (of a Q tile for the Q warps, of a K/V tile for the others).
  __device__ __forceinline__ int slice0() const {
    return kSplitRoles ? (warp & 1) * kSlicesPerWarp : warp;
  }
  __device__ __forceinline__ bool copies_q() const { return !kSplitRoles || warp >= 2; }
  __device__ __forceinline__ bool copies_kv() const { return !kSplitRoles || warp < 2; }
  // The lane's key rows of tile n in each of the warp's slices.
  __device__ __forceinline__ KvSources lookup_slices(const MTile& t, int n) const {
    KvSources src;
#pragma unroll
    for (int i = 0; i < kSlicesPerWarp; ++i) src.at[i] = lookup(t, n, slice0() + i);
    return src;
  }

  // Lane's key row of tile n (a plain load of the page id for paged K/V: issued here,
  // consumed at the next issue, so the load overlaps the wait for a free stage).
  __device__ __forceinline__ KvRowSource lookup(const MTile& t, int n, int slice) const {
    const prefill_tc::KernelArgs& k = a.k;
    KvRowSource src;
    const int key = n * kBlockN + slice * kKvRowsPerWarp + lane;
    // No row sees it (also covers key >= kv_len), or a lane past the warp's slice.
    if (key >= t.ranges.any.hi || lane >= kKvRowsPerWarp) return src;
    if (k.paged) {
      const uint32_t page = k.page_div.div(uint32_t(key));
      src.unit = t.g.pages[page];
      src.slot = key - int(page * k.page_div.divisor);
    } else {
      src.unit = t.b;
      src.slot = t.g.kv_base + key;
    }
    return src;
  }

  // The rows of the warp's Q slices, at most 32 per copy (one row address per lane).
  __device__ __forceinline__ void load_q(const MTile& t, uint32_t tile) const {
#pragma unroll
    for (int i = 0; i < kSlicesPerWarp; ++i) {
      const int row0 = (slice0() + i) * kQRowsPerWarp;
      load_q_rows<kQRowsPerWarp < 32 ? kQRowsPerWarp : 32>(t, tile, row0);
      if constexpr (kQRowsPerWarp > 32) load_q_rows<kQRowsPerWarp - 32>(t, tile, row0 + 32);
    }
  }
  template <int kRows>
  __device__ __forceinline__ void load_q_rows(const MTile& t, uint32_t tile, int row0) const {
    const prefill_tc::KernelArgs& k = a.k;
    const int r = row0 + lane;
    int64_t off = -1;
    if ((kRows == 32 || lane < kRows) && r < t.rows.count) {
      int i, head;
      t.rows.locate(r, i, head);
      off = prefill_tc::token_offset(t.b, t.g.qo_start, i, head, k.p.q_stride_batch,
                                     k.p.q_stride_token, k.p.q_stride_head);
    }
    const T* q = static_cast<const T*>(k.p.q);
    copy_warp_rows<T, kHeadDim, kRows>(tile, Cfg::kBlockM, row0, row_address(q, off),
                                       reinterpret_cast<const char*>(q), lane);
  }

  // The warp's slice of a K/V tile by TMA (kv_tma.h), when every row of it is a key (src of
  // each lane < kKvRowsPerWarp names a page or batch row) and each row's token coordinate
  // fits the map's 32-bit coordinates; false: the caller copies it by cp.async. Lane 0
  // arrives on `full` expecting the slice's bytes, the other lanes plainly, so the barrier
  // still counts one arrival per producer thread and also waits for the bytes. Lane j < boxes
  // x column blocks issues box j / kColBlocks's column block j % kColBlocks.
  __device__ __forceinline__ bool load_slice_tma(const MTile& t, const KvRowSource& src,
                                                 const KvTmaMap& m, uint32_t full,
                                                 uint32_t tile, int slice) const {
    const int box_rows = a.kv_tma.box_rows;
    if (box_rows == 0) return false;
    const int64_t coord = int64_t(src.unit) * m.unit_tokens + src.slot;
    const bool fits = lane >= kKvRowsPerWarp || (src.unit >= 0 && coord <= INT32_MAX);
    if (!__all_sync(0xffffffffu, fits)) return false;
    const int box = lane / Cfg::kColBlocks;
    const int col_block = lane % Cfg::kColBlocks;
    const int token = __shfl_sync(0xffffffffu, int(coord), (box * box_rows) & 31);
    if (lane == 0)
      sm90::mbarrier_arrive_expect_tx(full, uint32_t(kKvRowsPerWarp * Cfg::kRowBytes));
    else
      sm90::mbarrier_arrive(full);
    __syncwarp();  // the bytes are announced before any of them can land
    if (box * box_rows < kKvRowsPerWarp) {
      const int row = slice * kKvRowsPerWarp + box * box_rows;
      const uint32_t dst = tile + uint32_t((col_block * kBlockN + row) * kSwizzleRowBytes);
      const int c1 = m.token_dim == 1 ? token : t.kv_head;
      const int c2 = m.token_dim == 1 ? t.kv_head : token;
      const int c0 = col_block * (kSwizzleRowBytes / Cfg::kElemBytes);
      if constexpr (kPairs) {
        // The slices of warps 0-1 come from rank 0, those of 2-3 from rank 1, each into both
        // blocks; the other block's warp announced the same bytes on its own barrier above.
        if (warp / (kProducerWarps / 2) == int(sm90::cluster_ctarank()))
          sm90::tma_load_3d_multicast(dst, &m.map, full, c0, c1, c2, 0x3);
      } else {
        sm90::tma_load_3d(dst, &m.map, full, c0, c1, c2);
      }
    }
    return true;
  }

  // One K or V tile into its ring's next stage (`tile`, its shared address): wait until the
  // stage is free, copy, mark it full. `pages` and the strides: k.p.k or k.p.v and theirs.
  template <int kStages>
  __device__ __forceinline__ void load_kv(const MTile& t, const KvSources& src,
                                          Ring<kStages>& ring, uint32_t full, uint32_t empty,
                                          uint32_t tile, const void* pages, int64_t stride_unit,
                                          int64_t stride_token, int64_t stride_head,
                                          const KvTmaMap& map) const {
    ring.wait_empty(empty);  // with kPairs, the peer's consumers have released it too
#pragma unroll
    for (int i = 0; i < kSlicesPerWarp; ++i) {
      const int slice = slice0() + i;
      if (a.ablate & 2) {
        sm90::mbarrier_arrive(ring.bar(full));
      } else if (!load_slice_tma(t, src.at[i], map, ring.bar(full), tile, slice)) {
        const int64_t off =
            src.at[i].offset(stride_unit, stride_token, int64_t(t.kv_head) * stride_head);
        const T* base = static_cast<const T*>(pages);
        copy_warp_rows<T, kHeadDim, kKvRowsPerWarp>(tile, kBlockN, slice * kKvRowsPerWarp,
                                                    row_address(base, off),
                                                    reinterpret_cast<const char*>(base), lane);
        signal_full(ring.bar(full));
      }
    }
    ring.advance();
  }
  __device__ __forceinline__ void load_k(const MTile& t, const KvSources& src,
                                         Ring<Cfg::kKStages>& ring) const {
    const prefill_tc::KernelArgs& k = a.k;
    load_kv(t, src, ring, s.k_full, s.k_empty, s.k_tile(ring.stage), k.p.k, k.p.k_stride_unit,
            k.p.k_stride_token, k.p.k_stride_head, a.kv_tma.k);
  }
  __device__ __forceinline__ void load_v(const MTile& t, const KvSources& src,
                                         Ring<Cfg::kVStages>& ring) const {
    const prefill_tc::KernelArgs& k = a.k;
    load_kv(t, src, ring, s.v_full, s.v_empty, s.v_tile(ring.stage), k.p.v, k.p.v_stride_unit,
            k.p.v_stride_token, k.p.v_stride_head, a.kv_tma.v);
  }

  // Publishes the M tile of q_ring's stage to the consumers (its tile slot, written by one
  // thread) and marks the stage sent: the consumers' wait on its full barrier covers both
  // the slot and the Q copies.
  template <class QRing>
  __device__ __forceinline__ void publish(const MTile& t, int state, const QRing& q_ring) const {
    static_assert(Cfg::kTileSlots == (Cfg::kQStages == 1 ? 2 : Cfg::kQStages),
                  "one slot per Q stage, or two taken by the parity of a single stage's uses");
    const uint32_t full = q_ring.bar(s.q_full);
    if (kSplitRoles ? warp == 2 && lane == 0 : threadIdx.x == 0) {
      TileSlot& slot = *reinterpret_cast<TileSlot*>(s.tile_slot(q_ring.slot()));
      slot.tile = t;
      slot.wg_all[0] = warpgroup_all_keys(a.k, t, 0);
      slot.wg_all[1] = warpgroup_all_keys(a.k, t, 1);
      if constexpr (Cfg::kConsumerWarpgroups == 3) slot.wg_all[2] = warpgroup_all_keys(a.k, t, 2);
      slot.state = state;
      sm90::mbarrier_arrive(full);  // release: the slot is visible to whoever sees the phase
    }
#pragma unroll
    for (int i = 0; i < kSlicesPerWarp; ++i) signal_full(full);
  }

  // The whole schedule of this block. Every M tile goes through a Q stage (a tile no row of
  // which sees a key with its slot only, no copies); then one kDone slot ends the consumers'
  // loop. K/V tiles go last to first (the consumers' order: the partial and diagonal tiles
  // come first), V one tile behind K: the consumers issue S = Q K_n^T before
  // O += P V_{n+1}. V_{n+1} is issued before K_n: its stage frees (after P V_{n+1}) no later
  // than the consumers need K_n, and where V has one stage more than K, earlier.
  __device__ __forceinline__ void run() const {
    Ring<Cfg::kQStages> q_ring;
    Ring<Cfg::kKStages> k_ring;
    Ring<Cfg::kVStages> v_ring;
    const Schedule sched = schedule<Cfg::kBlockM, kPairs>(a, lane);
    for (int64_t vt = -1;;) {
      MTile t;
      if constexpr (kPairs) {
        if (!next_pair(sched, vt)) break;
        if (!cluster_pair<Cfg::kBlockM, kBlockN>(a, sched, vt, int(sm90::cluster_ctarank()), t))
          continue;
      } else {
        if (!next_tile(sched, vt)) break;
        if (!resolve_m_tile<Cfg::kBlockM, kBlockN>(a, sched, vt, t, lane)) continue;
      }
      const bool empty = t.n_end <= t.n_begin;
      if (copies_q()) {
        q_ring.wait_empty(s.q_empty);
        if (!empty && (a.ablate & 16) == 0) load_q(t, s.q_tile(q_ring.stage));
        publish(t, empty ? TileSlot::kEmpty : TileSlot::kRun, q_ring);
        q_ring.advance();
      }
      if (empty || !copies_kv()) continue;

      int n = t.n_end - 1;
      KvSources cur = lookup_slices(t, n);
      KvSources next = n > t.n_begin ? lookup_slices(t, n - 1) : KvSources{};
      load_k(t, cur, k_ring);
      for (--n; n >= t.n_begin; --n) {
        const KvSources prev = cur;
        cur = next;
        if (n > t.n_begin) next = lookup_slices(t, n - 1);
        load_v(t, prev, v_ring);
        load_k(t, cur, k_ring);
      }
      load_v(t, cur, v_ring);
    }
    if (copies_q()) {
      q_ring.wait_empty(s.q_empty);
      publish(MTile{}, TileSlot::kDone, q_ring);
    }
    // Copies still in flight complete on their barriers regardless; waiting keeps this
    // thread's outstanding cp.async from outliving it.
    sm90::cp_async_wait_all();
  }
};

}  // namespace flashpage::cuda::prefill_hopper
