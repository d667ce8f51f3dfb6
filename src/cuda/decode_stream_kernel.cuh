#pragma once
// Streamed paged decode for sm_90: one persistent block per SM walks its share of the work
// list (the planner balances tokens across blocks, cutting rows where needed; cut rows are
// merged afterwards from their partials).
//
// Warp roles. The warps after the consumers are producers (args.producer_warps): for each
// sub-unit (item x KV-head block x query-head group) the first bulk-copies the query rows into
// the query slot, and producer p fills the ring's stages whose sequence number is p mod the
// producer count (a copy with per-lane operands is issued lane by lane, ~100 cycles each: one
// warp cannot keep up with single-token copies), with the item's K/V tokens, in one of two
// ways:
//  - TMA (args.kv_box_tokens > 0, where the driver encodes the tensor maps): one box per 8
//    tokens (pages of a multiple of 8) or per token (other page sizes) of K and of V covering
//    all the block's KV heads, into 128-byte-swizzled stages (rows 128 B-aligned,
//    conflict-free ldmatrix); a sub-unit's stages start on a box boundary and the consumers
//    mask the keys before its range and zero the V rows past its end;
//  - otherwise: one bulk copy per token of K and of V covering the block's KV heads (their
//    rows are adjacent in NHD pages; HND pages take one copy per head) into rows padded by
//    16 B.
// Every token's (or box's) page is looked up on its own.
// Copies complete on the stage's "full" mbarrier; consumers release the stage on its
// "empty" mbarrier. The producer never waits for the consumers' epilogues: the next item's
// tokens are already in flight while they finish the last one.
//
// Consumer warp c serves KV head c % heads of the block and token slice c / heads of every
// stage: per 16 tokens, S[16 query heads x 16] = Q.K^T on m16n8k16 MMAs, online softmax in
// the log2 domain, O += P.V. Every K/V byte is read from HBM once for all query heads of its
// group. Where several warps share a head (blocks of fewer than 8 KV heads: 2, 4 or 8 warps
// per head, each on its own 16-token slice of every stage), each writes its own partial for the
// split merge, or, with args.combine (the default since session 27), they fold their states
// into the head's first warp through shared memory (the combine buffer) at the end of a
// sub-unit, and that warp alone writes the output or the item's partial.
#include <cstdint>

#include "core/check.h"
#include "cuda/cuda_check.h"
#include "cuda/decode_args.h"
#include "cuda/decode_warp_attend.cuh"
#include "cuda/kernel_attributes.h"
#include "cuda/device_types.cuh"
#include "cuda/ptx.cuh"
#include "cuda/ptx_sm90.cuh"
#include "cuda/softmax_state.cuh"
#include "ops/decode_tiling.h"
#include "ops/workspace.h"

namespace flashpage::cuda {

template <class T, int kHeadDim, int kConsumerWarps>
struct StreamDecodeBlock {
  using Tiling = StreamDecodeTiling;
  static constexpr int kKSteps = kHeadDim / 16;   // MMA K steps of Q.K^T
  static constexpr int kDimTiles = kHeadDim / 8;  // MMA N tiles of O
  static constexpr int kVecBytes = 16;
  static constexpr int kHeadBytes = kHeadDim * Tiling::kElemBytes;
  static constexpr int kQueryRowBytes = Tiling::query_row_bytes(kHeadDim);
  // Producer warps: 1 to kMaxProducerWarps at run time (args.producer_warps).
  static constexpr int kMaxProducerWarps = Tiling::max_producer_warps(kConsumerWarps, kHeadDim);
  static constexpr int kMaxThreads = (kConsumerWarps + kMaxProducerWarps) * 32;
  // Stage tokens per producer lane: a stage holds 16 tokens per warp sharing a head, the
  // most where one KV head has all the block's warps (128 tokens on 8 warps, 64 on 4).
  static_assert(kConsumerWarps <= Tiling::kMaxWarpsPerHead && kConsumerWarps % 2 == 0);
  static constexpr int kTokensPerLane = Tiling::stage_tokens(1, kConsumerWarps) / 32;

  const StreamDecodeArgs& a;
  uint32_t bars;       // full[stages], empty[stages], q_full, q_empty (8 bytes each)
  uint32_t q_slot;     // [heads][query_rows][kQueryRowBytes]
  uint32_t stage0;     // stages of K then V (padded token rows, or TMA boxes)
  uint8_t* smem_base;  // the generic address of `bars`
  int lane, warp;

  // Per-block constants.
  int heads, row_bytes, stage_tokens, stage_bytes, query_rows, sub_units;
  int part_blocks;  // head blocks of a head part (an item's virtual row)
  int box_tokens;  // TMA: tokens per box (8 or 1); 0: bulk copies
  int box_bytes;   // TMA: what one box brings (box_tokens x heads x D)
  int box_stride;  // TMA: bytes from one box to the next in a stage

  __device__ __forceinline__ StreamDecodeBlock(const StreamDecodeArgs& args, uint8_t* smem)
      : a(args) {
    lane = int(threadIdx.x) & 31;
    warp = int(threadIdx.x) >> 5;
    heads = a.heads_per_block;
    row_bytes = Tiling::token_row_bytes(heads, kHeadDim);
    stage_tokens = Tiling::stage_tokens(heads, kConsumerWarps);
    box_tokens = a.kv_box_tokens;
    stage_bytes = Tiling::stage_bytes(heads, kConsumerWarps, kHeadDim, box_tokens);
    box_bytes = box_tokens > 0 ? Tiling::tma_box_bytes(heads, kHeadDim, box_tokens) : 0;
    box_stride = box_tokens > 0 ? Tiling::tma_box_stride(heads, kHeadDim, box_tokens) : 0;
    query_rows = Tiling::query_rows(a.d.group_size);
    part_blocks = (a.d.num_kv_heads >> a.d.head_parts_log2) / heads;
    sub_units = part_blocks * a.query_groups;
    bars = ptx::smem_addr(smem);
    smem_base = smem;
    q_slot = bars + Tiling::kBarrierBytes;
    stage0 = combine_buffer() + uint32_t(Tiling::combine_bytes(heads, kConsumerWarps, kHeadDim,
                                                               a.d.group_size, a.combine));
    if (box_tokens > 0) {
      constexpr uint32_t kAtom = Tiling::kSwizzleAtomBytes;
      stage0 = (stage0 + kAtom - 1) & ~(kAtom - 1);
    }
  }
  // [heads][warps per head - 1][query_rows][D + 8] f32 O, then their (m, d): combine_slices.
  // These two are computed where used, not kept as members: at head_dim 256 the kernel sits
  // at the register cap, and members that live through the loops made ptxas spill more.
  __device__ __forceinline__ uint32_t combine_buffer() const {
    return q_slot + uint32_t(Tiling::query_bytes(heads, kHeadDim, a.d.group_size));
  }
  __device__ __forceinline__ int warps_per_head() const {
    return Tiling::warps_per_head(heads, kConsumerWarps);
  }
  __device__ __forceinline__ uint32_t k_stage(int s) const {
    return stage0 + uint32_t(s * stage_bytes);
  }
  __device__ __forceinline__ uint32_t v_stage(int s) const {
    return k_stage(s) + uint32_t(stage_bytes / 2);
  }

  __device__ __forceinline__ uint32_t full_bar(int s) const { return bars + 8u * uint32_t(s); }
  __device__ __forceinline__ uint32_t empty_bar(int s) const {
    return bars + 8u * uint32_t(a.stages + s);
  }
  __device__ __forceinline__ uint32_t q_full_bar() const { return bars + 8u * uint32_t(2 * a.stages); }
  __device__ __forceinline__ uint32_t q_empty_bar() const {
    return bars + 8u * uint32_t(2 * a.stages + 1);
  }

  // What one sub-unit of an item covers. Both roles derive it the same way, so their stage
  // sequences agree without talking to each other.
  struct SubUnit {
    int row, lo, hi, slot;  // row: the batch row (the item's is a virtual row)
    int start;      // first token of the first stage: lo, or lo rounded down to a TMA box
    int kv_head0;   // first KV head of the block
    int q_offset;   // query head of (KV head kv_head0, row 0) minus kv_head0 * group
    int rows;       // valid query rows per KV head (<= 16)
  };
  __device__ __forceinline__ SubUnit sub_unit(const int4& item, int u) const {
    SubUnit s;
    s.row = batch_row(item.x);
    s.lo = item.y;
    s.hi = item.z;
    s.slot = item.w;
    if (a.d.window_left >= 0) {
      const int length = a.d.pages.length(s.row);
      s.lo = max(s.lo, length - 1 - a.d.window_left);  // keys before the window: not loaded
    }
    const int head_block = u / a.query_groups, query_group = u - head_block * a.query_groups;
    const int part = item.x - (s.row << a.d.head_parts_log2);
    s.kv_head0 = (part * part_blocks + head_block) * heads;
    s.q_offset = query_group * Tiling::kRowsPerWarp;
    s.rows = min(Tiling::kRowsPerWarp, a.d.group_size - s.q_offset);
    s.start = box_tokens > 1 && s.lo < s.hi ? s.lo & ~(box_tokens - 1) : s.lo;
    return s;
  }

  // Work items name virtual rows b * P + p (decode_args.h, head_parts_log2).
  __device__ __forceinline__ int batch_row(int virtual_row) const {
    return virtual_row >> a.d.head_parts_log2;
  }

  // The block's record sits right after the header (workspace.h: {begin, end, first page
  // base, 0} then the first item); the items follow the grid's records, 16-byte aligned.
  __device__ __forceinline__ const int4* block_record() const {
    return reinterpret_cast<const int4*>(a.d.work_ints + Workspace::Impl::kHeaderInts) +
           blockIdx.x * (Workspace::Impl::kBlockRecordInts / 4);
  }
  __device__ __forceinline__ void block_items(int& begin, int& end) const {
    const int4 range = block_record()[0];
    begin = range.x;
    end = range.y;
  }
  __device__ __forceinline__ int4 item_at(int w) const {
    return reinterpret_cast<const int4*>(
        a.d.work_ints + Workspace::Impl::stream_items_offset(gridDim.x))[w];
  }

  // ---- producer (one warp) -------------------------------------------------------------
  __device__ __forceinline__ void copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                       uint64_t policy) const {
    if (a.l2_evict_first)
      ptx::bulk_copy_g2s_hint(dst, src, bytes, bar, policy);
    else
      ptx::bulk_copy_g2s(dst, src, bytes, bar);
  }

  // What the producer loads before the barrier set-up, so that round trip overlaps it: the
  // block's record, whose two words are independent loads (the planner put the first item
  // and its row's first page there, so that the page ids are the next and last dependent
  // load before the first copy).
  struct ProducerStart {
    int begin = 0, end = 0;
    int4 item = make_int4(0, 0, 0, 0);
    int32_t page_base = 0;  // indptr[item's batch row]
  };
  __device__ __forceinline__ ProducerStart producer_start() const {
    const int4* record = block_record();
    const int4 range = record[0];
    ProducerStart p;
    p.item = record[1];
    p.begin = range.x;
    p.end = range.y;
    p.page_base = range.z;
    return p;
  }

  // Byte offsets in the K/V pages of this lane's tokens (lane, lane + 32, ...) of the stage
  // at tile_lo, at the block's first KV head; -1 from the n-th token on. Looked up before the
  // wait for a free stage, so the page-table loads' latency hides behind it.
  __device__ __forceinline__ void token_offsets(const SubUnit& su, int tile_lo,
                                                const int32_t* row_pages, int n,
                                                int64_t (&off)[kTokensPerLane]) const {
    const PageTableView& pt = a.d.pages;
#pragma unroll
    for (int i = 0; i < kTokensPerLane; ++i) {
      const int t = lane + 32 * i;
      off[i] = -1;
      if (t < n) {
        uint32_t page_index, in_page;
        pt.page_divisor.divmod(uint32_t(tile_lo + t), page_index, in_page);
        off[i] = (int64_t(row_pages[page_index]) * pt.stride_page +
                  int64_t(in_page) * pt.stride_token + int64_t(su.kv_head0) * pt.stride_head) *
                 Tiling::kElemBytes;
      }
    }
  }

  // One stage of padded token rows: a bulk copy per token of K and of V.
  __device__ __forceinline__ void produce_rows(const SubUnit& su, int tile_lo,
                                               const int32_t* row_pages, int stage,
                                               uint32_t phase, uint64_t policy, const uint8_t* k,
                                               const uint8_t* v) const {
    const PageTableView& pt = a.d.pages;
    const int n = min(stage_tokens, su.hi - tile_lo);
    int64_t off[kTokensPerLane];
    token_offsets(su, tile_lo, row_pages, n, off);
    ptx::mbarrier_wait(empty_bar(stage), phase ^ 1u);
    if (lane == 0)
      ptx::mbarrier_arrive_expect_tx(full_bar(stage), uint32_t(2 * n * heads * kHeadBytes));
    __syncwarp();
    const uint32_t k_dst = k_stage(stage), v_dst = v_stage(stage);
#pragma unroll
    for (int i = 0; i < kTokensPerLane; ++i) {
      if (off[i] < 0) continue;
      const uint32_t at = uint32_t((lane + 32 * i) * row_bytes);
      if (a.heads_contiguous) {
        // NHD: the block's heads of one token are one run of heads * D elements.
        copy(k_dst + at, k + off[i], uint32_t(heads * kHeadBytes), full_bar(stage), policy);
        copy(v_dst + at, v + off[i], uint32_t(heads * kHeadBytes), full_bar(stage), policy);
      } else {
        // HND (or strided heads): one copy per head.
        for (int h = 0; h < heads; ++h) {
          const int64_t head_off = int64_t(h) * pt.stride_head * Tiling::kElemBytes;
          copy(k_dst + at + uint32_t(h * kHeadBytes), k + off[i] + head_off, kHeadBytes,
               full_bar(stage), policy);
          copy(v_dst + at + uint32_t(h * kHeadBytes), v + off[i] + head_off, kHeadBytes,
               full_bar(stage), policy);
        }
      }
    }
  }

  // One stage of TMA boxes: lane j loads boxes j, j + 32, ..., tokens tile_lo + j * box_tokens
  // onwards, of K and of V (a box never crosses a page: tile_lo and the page size are
  // multiples of box_tokens). Boxes past the sub-unit's end are not loaded; rows past it in
  // the last box of 8 are whatever the page holds there, which the consumers mask (K) and
  // overwrite with zeros (V) before use.
  __device__ __forceinline__ void produce_boxes(const SubUnit& su, int tile_lo,
                                                const int32_t* row_pages, int stage,
                                                uint32_t phase, uint64_t policy) const {
    const PageTableView& pt = a.d.pages;
    const int boxes = min(stage_tokens, su.hi - tile_lo + box_tokens - 1) / box_tokens;
    int32_t page[kTokensPerLane];
    uint32_t in_page[kTokensPerLane];
#pragma unroll
    for (int i = 0; i < kTokensPerLane; ++i) {
      const int j = lane + 32 * i;
      page[i] = -1;
      if (j < boxes) {
        uint32_t page_index;
        pt.page_divisor.divmod(uint32_t(tile_lo + j * box_tokens), page_index, in_page[i]);
        page[i] = row_pages[page_index];
      }
    }
    ptx::mbarrier_wait(empty_bar(stage), phase ^ 1u);
    if (lane == 0)
      ptx::mbarrier_arrive_expect_tx(full_bar(stage), uint32_t(2 * boxes * box_bytes));
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kTokensPerLane; ++i) {
      if (page[i] < 0) continue;
      const uint32_t at = uint32_t((lane + 32 * i) * box_stride);
      ptx::tma_load_5d_hint(k_stage(stage) + at, &a.k_map, full_bar(stage), 0, int(in_page[i]),
                            0, su.kv_head0, page[i], policy);
      ptx::tma_load_5d_hint(v_stage(stage) + at, &a.v_map, full_bar(stage), 0, int(in_page[i]),
                            0, su.kv_head0, page[i], policy);
    }
  }

  __device__ __forceinline__ void produce(const ProducerStart& start) {
    const int producer = warp - kConsumerWarps, producers = a.producer_warps;
    const uint64_t policy = ptx::l2_evict_first_policy();
    const uint8_t* q = static_cast<const uint8_t*>(a.d.q);
    const uint8_t* k = static_cast<const uint8_t*>(a.d.k_pages);
    const uint8_t* v = static_cast<const uint8_t*>(a.d.v_pages);
    const PageTableView& pt = a.d.pages;
    int stage = 0, turn = 0;  // turn: the stage's sequence number mod producers
    uint32_t phase = 0, q_phase = 0;
    int4 item = start.item;
    int32_t page_base = start.page_base;
    for (int w = start.begin; w < start.end; ++w) {
      // The next item and its page list, loaded now so they are ready when this one ends.
      int4 next = item;
      if (w + 1 < start.end) next = item_at(w + 1);
      const int32_t* row_pages = pt.indices + page_base;
      for (int u = 0; u < sub_units; ++u) {
        const SubUnit su = sub_unit(item, u);
        if (producer == 0) {
          // Query rows of the block's heads into the (single) query slot, once the consumers
          // hold the previous sub-unit's queries in registers.
          ptx::mbarrier_wait(q_empty_bar(), q_phase ^ 1u);
          const int copies = heads * su.rows;
          if (lane == 0) ptx::mbarrier_arrive_expect_tx(q_full_bar(), uint32_t(copies * kHeadBytes));
          __syncwarp();
          for (int e = lane; e < copies; e += 32) {
            const int h = e / su.rows, r = e - h * su.rows;
            const int head = (su.kv_head0 + h) * a.d.group_size + su.q_offset + r;
            const uint8_t* src =
                q + (int64_t(su.row) * a.d.q_stride_batch + int64_t(head) * a.d.q_stride_head) * 2;
            ptx::bulk_copy_g2s(q_slot + uint32_t((h * query_rows + r) * kQueryRowBytes), src,
                               kHeadBytes, q_full_bar());
          }
          q_phase ^= 1u;
        }

        for (int tile_lo = su.start; tile_lo < su.hi; tile_lo += stage_tokens) {
          if (turn == producer) {
            if (box_tokens > 0)
              produce_boxes(su, tile_lo, row_pages, stage, phase, policy);
            else
              produce_rows(su, tile_lo, row_pages, stage, phase, policy, k, v);
          }
          if (++turn == producers) turn = 0;
          if (++stage == a.stages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
      if (w + 1 < start.end) page_base = pt.indptr[batch_row(next.x)];
      item = next;
    }
  }

  // ---- consumers ------------------------------------------------------------------------
  DecodeWarpState<T, kHeadDim> st;
  uint32_t qa[kKSteps][4];  // the 16 x D query tile as MMA A fragments

  // Warps sharing a head: the others' states (denominators already summed over the quads)
  // folded into the head's first warp (slice 0) through the combine buffer. Named barrier
  // 1 + head_local joins the head's warps, once so that slice 0 reads complete states and
  // once so that none overwrites them before it has.
  __device__ __forceinline__ void combine_slices(const SubUnit& su, int head_local, int slice) {
    const int warps_per_head = this->warps_per_head();
    float* o_rows = reinterpret_cast<float*>(smem_base + (combine_buffer() - bars));
    constexpr int kRowFloats = Tiling::combine_row_floats(kHeadDim);
    float* md_rows = o_rows + heads * (warps_per_head - 1) * query_rows * kRowFloats;
    const int g = lane >> 2, c = 2 * (lane & 3);
    const int first_state = head_local * (warps_per_head - 1) * query_rows;
    if (slice > 0) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = g + 8 * i;
        if (r >= su.rows) continue;
        const int at = first_state + (slice - 1) * query_rows + r;
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n)
          *reinterpret_cast<float2*>(o_rows + at * kRowFloats + 8 * n + c) =
              make_float2(st.o[n][2 * i], st.o[n][2 * i + 1]);
        if ((lane & 3) == 0)
          *reinterpret_cast<float2*>(md_rows + 2 * at) = make_float2(st.m[i], st.d[i]);
      }
    }
    ptx::named_barrier_sync(1 + head_local, 32 * warps_per_head);
    if (slice == 0) {
      for (int other = 1; other < warps_per_head; ++other) {
        // Rows past the valid ones fold in row 0's state (finite; never written out).
        const int at0 = first_state + (other - 1) * query_rows;
        const int rows[2] = {g < su.rows ? g : 0, g + 8 < su.rows ? g + 8 : 0};
        float mine[2], theirs[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float2 md = *reinterpret_cast<const float2*>(md_rows + 2 * (at0 + rows[i]));
          const float m_new = fmaxf(st.m[i], md.x);
          mine[i] = softmax_rescale(st.m[i], m_new);
          theirs[i] = softmax_rescale(md.x, m_new);
          st.m[i] = m_new;
          st.d[i] = st.d[i] * mine[i] + md.y * theirs[i];
        }
        const float* o0 = o_rows + (at0 + rows[0]) * kRowFloats + c;
        const float* o1 = o_rows + (at0 + rows[1]) * kRowFloats + c;
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n) {
          const float2 x = *reinterpret_cast<const float2*>(o0 + 8 * n);
          const float2 y = *reinterpret_cast<const float2*>(o1 + 8 * n);
          st.o[n][0] = st.o[n][0] * mine[0] + x.x * theirs[0];
          st.o[n][1] = st.o[n][1] * mine[0] + x.y * theirs[0];
          st.o[n][2] = st.o[n][2] * mine[1] + y.x * theirs[1];
          st.o[n][3] = st.o[n][3] * mine[1] + y.y * theirs[1];
        }
      }
    }
    ptx::named_barrier_sync(1 + head_local, 32 * warps_per_head);
  }

  // Final output (slot < 0) or the item's partial for its head's rows: with the combine
  // (a.combine), by the head's first warp after the others' states are folded into it
  // (partial slot); without, by every warp (slot + its token slice).
  __device__ __forceinline__ void epilogue(const SubUnit& su, int head_local, int slice) {
    st.reduce_denominators();
    if (a.combine && warps_per_head() > 1) {
      combine_slices(su, head_local, slice);
      if (slice > 0) return;
    }
    const int g = lane >> 2, c = 2 * (lane & 3);
    float* partial_lse_base =
        a.d.partial_out + int64_t(a.d.work_ints[1]) * a.d.num_qo_heads * kHeadDim;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = g + 8 * i;
      if (r >= su.rows) continue;
      const int head = (su.kv_head0 + head_local) * a.d.group_size + su.q_offset + r;
      const float inv = st.d[i] > 0.0f ? 1.0f / st.d[i] : 0.0f;
      const float lse = softmax_lse(st.m[i], st.d[i]);
      if (su.slot < 0) {
        T* out = static_cast<T*>(a.d.out) + int64_t(su.row) * a.d.out_stride_batch +
                 int64_t(head) * a.d.out_stride_head;
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n)
          *reinterpret_cast<uint32_t*>(out + 8 * n + c) =
              ptx::pack2<T>(st.o[n][2 * i] * inv, st.o[n][2 * i + 1] * inv);
        if (a.d.lse != nullptr && (lane & 3) == 0)
          a.d.lse[int64_t(su.row) * a.d.lse_stride_batch + int64_t(head) * a.d.lse_stride_head] = lse;
      } else {
        const int64_t at = int64_t(su.slot + (a.combine ? 0 : slice)) * a.d.num_qo_heads + head;
        float* po = a.d.partial_out + at * kHeadDim;
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n)
          *reinterpret_cast<float2*>(po + 8 * n + c) =
              make_float2(st.o[n][2 * i] * inv, st.o[n][2 * i + 1] * inv);
        if ((lane & 3) == 0) partial_lse_base[at] = lse;
      }
    }
  }

  // TMA stages: the V rows of this warp's head and 16-token slice (at v_slice) from token
  // `valid` on are overwritten with zeros, so that their P = 0 cannot meet NaN patterns (a
  // page's unwritten slots, or a stage's first use) in P.V. True when anything was written.
  template <class Layout>
  __device__ __forceinline__ bool zero_v_past_end(uint32_t v_slice, int head_local, int valid) {
    if (valid >= Tiling::kSliceTokens) return false;
    constexpr int kColBlocks = kHeadDim / 64;
    constexpr int kChunksPerToken = kColBlocks * 8;
    for (int p = lane; p < Tiling::kSliceTokens * kChunksPerToken; p += 32) {
      const int t = p / kChunksPerToken, c = (p % kChunksPerToken) / 8, chunk = p % 8;
      if (t < valid) continue;
      const uint32_t at = v_slice + Layout::row_offset(t, head_local, c, box_stride) + chunk * 16;
      *reinterpret_cast<uint4*>(smem_base + (at - bars)) = make_uint4(0, 0, 0, 0);
    }
    __syncwarp();
    return true;
  }

  // One 16-token slice on TMA boxes of kBoxTokens tokens.
  template <int kBoxTokens, class QFragment>
  __device__ __forceinline__ bool attend_boxes(const SubUnit& su, int stage, int slice,
                                               int head_local, int first, QFragment&& q_fragment) {
    using Layout = SwizzledKvRows<kHeadDim, kBoxTokens>;
    const uint32_t at = uint32_t(slice * (Tiling::kSliceTokens / kBoxTokens) * box_stride);
    const bool zeroed = zero_v_past_end<Layout>(v_stage(stage) + at, head_local, su.hi - first);
    st.attend16(a.d, q_fragment,
                Layout(k_stage(stage) + at, v_stage(stage) + at, box_stride, head_local, lane),
                su.lo, first, su.hi, lane);
    return zeroed;
  }

  __device__ __forceinline__ void consume() {
    const int head_local = warp % heads, slice = warp / heads;
    int stage = 0;
    uint32_t phase = 0, q_phase = 0;
    int begin, end;
    block_items(begin, end);
    for (int w = begin; w < end; ++w) {
      const int4 item = item_at(w);
      for (int u = 0; u < sub_units; ++u) {
        const SubUnit su = sub_unit(item, u);
        ptx::mbarrier_wait(q_full_bar(), q_phase);
        {
          // Rows past the valid ones read row 0 again (finite values; never written out).
          const int r = lane & 15;
          const uint32_t q_addr =
              q_slot + uint32_t((head_local * query_rows + (r < su.rows ? r : 0)) * kQueryRowBytes +
                                (lane >> 4) * kVecBytes);
#pragma unroll
          for (int ks = 0; ks < kKSteps; ++ks) ptx::ldmatrix_x4(qa[ks], q_addr + ks * 2 * kVecBytes);
        }
        __syncwarp();
        if (lane == 0) ptx::mbarrier_arrive(q_empty_bar());
        q_phase ^= 1u;
        st.init();

        for (int tile_lo = su.start; tile_lo < su.hi; tile_lo += stage_tokens) {
          ptx::mbarrier_wait(full_bar(stage), phase);
          const int first = tile_lo + slice * Tiling::kSliceTokens;
          bool zeroed = false;
          if (first < su.hi && (a.ablate & 1) == 0) {
            const auto q_fragment = [&](int ks, uint32_t(&frag)[4]) {
#pragma unroll
              for (int r = 0; r < 4; ++r) frag[r] = qa[ks][r];
            };
            if (box_tokens == Tiling::kTmaBoxTokens) {
              zeroed = attend_boxes<Tiling::kTmaBoxTokens>(su, stage, slice, head_local, first,
                                                           q_fragment);
            } else if (box_tokens == 1) {
              zeroed = attend_boxes<1>(su, stage, slice, head_local, first, q_fragment);
            } else {
              const uint32_t at =
                  uint32_t(slice * Tiling::kSliceTokens * row_bytes + head_local * kHeadBytes);
              st.attend16(a.d, q_fragment,
                          PaddedKvRows(k_stage(stage) + at, v_stage(stage) + at, row_bytes, lane),
                          first, first, su.hi, lane);
            }
          }
          // The zeros were generic-proxy writes; the next TMA into the stage must follow them.
          if (zeroed) ptx::fence_proxy_async_shared();
          __syncwarp();
          if (lane == 0) ptx::mbarrier_arrive(empty_bar(stage));
          if (++stage == a.stages) {
            stage = 0;
            phase ^= 1u;
          }
        }
        epilogue(su, head_local, slice);
      }
    }
  }

  // Timing experiment (ablate bit 2, with bit 1: no merge; wrong results): writes the block's
  // SM, start and end (globaltimer, low 32 bits: the last consumer warp to finish) as 3 u32
  // at out-LSE [3 * block] (the caller sizes it and zeroes it).
  // The start is written before the consumer loop, so that no register holds it through
  // the loop (at head_dim 128 and 256 ptxas spilled it).
  __device__ __forceinline__ void record_block_start() const {
    if (lane != 0 || warp != 0 || a.d.lse == nullptr) return;
    uint32_t* rec = reinterpret_cast<uint32_t*>(a.d.lse) + 3 * blockIdx.x;
    rec[0] = ptx::smid();
    rec[1] = uint32_t(ptx::globaltimer());
  }
  __device__ __forceinline__ void record_block_end() const {
    if (lane != 0 || a.d.lse == nullptr) return;
    atomicMax(reinterpret_cast<uint32_t*>(a.d.lse) + 3 * blockIdx.x + 2,
              uint32_t(ptx::globaltimer()));
  }

  // Padded rows: zeroes the V half of every stage once: tokens past an item's end are never
  // copied, and their P = 0 must not meet NaN bit patterns in P.V (masked K rows are
  // harmless: their logits are replaced by -inf). (TMA stages zero such rows per slice.)
  // Then initialises the barriers.
  __device__ __forceinline__ void init(uint8_t* smem) {
    if (box_tokens == 0) {
      const int v_bytes = stage_bytes / 2;
      for (int s = 0; s < a.stages; ++s)
        for (int at = int(threadIdx.x) * 16; at < v_bytes; at += int(blockDim.x) * 16)
          *reinterpret_cast<uint4*>(smem + (v_stage(s) - bars) + at) = make_uint4(0, 0, 0, 0);
    }
    ptx::fence_proxy_async_shared();
    if (threadIdx.x == 0) {
      for (int s = 0; s < a.stages; ++s) {
        ptx::mbarrier_init(full_bar(s), 1);
        ptx::mbarrier_init(empty_bar(s), kConsumerWarps);
      }
      ptx::mbarrier_init(q_full_bar(), 1);
      ptx::mbarrier_init(q_empty_bar(), kConsumerWarps);
      ptx::fence_barrier_init();
    }
    __syncthreads();
  }
};

template <class T, int kHeadDim, int kConsumerWarps>
__global__ void __launch_bounds__(StreamDecodeBlock<T, kHeadDim, kConsumerWarps>::kMaxThreads, 1)
    stream_decode_kernel(const __grid_constant__ StreamDecodeArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  StreamDecodeBlock<T, kHeadDim, kConsumerWarps> block(args, smem);
  typename StreamDecodeBlock<T, kHeadDim, kConsumerWarps>::ProducerStart start;
  if (block.warp >= kConsumerWarps) start = block.producer_start();
  block.init(smem);
  if (block.warp >= kConsumerWarps) {
    block.produce(start);
  } else {
    if (args.ablate & 4) block.record_block_start();
    block.consume();
    if (args.ablate & 4) block.record_block_end();
  }
#endif
}

}  // namespace flashpage::cuda

namespace flashpage::cuda {

template <class T, int kHeadDim, int kConsumerWarps>
void launch_stream_decode_warps(const StreamDecodeArgs& args, int grid, cudaStream_t stream) {
  constexpr auto kernel = &stream_decode_kernel<T, kHeadDim, kConsumerWarps>;
  // The limit is set once per kernel: the largest any group size needs.
  allow_shared_memory<kernel>(StreamDecodeTiling::kSmemBudget);
  using Block = StreamDecodeBlock<T, kHeadDim, kConsumerWarps>;
  check::require(args.producer_warps >= 1 && args.producer_warps <= Block::kMaxProducerWarps &&
                     args.producer_warps <= args.stages,
                 "batch_decode: expected 1 to ", Block::kMaxProducerWarps,
                 " producer warps (and no more than the ", args.stages, " stages), got ",
                 args.producer_warps);
  kernel<<<grid, (kConsumerWarps + args.producer_warps) * 32, args.smem_bytes, stream>>>(args);
  FP_CUDA_CHECK_LAUNCH();
}

template <class T, int kHeadDim>
void launch_stream_decode(const StreamDecodeArgs& args, int grid, cudaStream_t stream) {
  const int warps = args.consumer_warps;
  // Each head's warps split a stage's tokens (at most kMaxWarpsPerHead) and combine.
  check::require(warps % args.heads_per_block == 0 &&
                     warps / args.heads_per_block <= StreamDecodeTiling::kMaxWarpsPerHead,
                 "batch_decode: ", warps, " consumer warps cannot share ", args.heads_per_block,
                 " KV heads");
  if constexpr (kHeadDim <= 128) {
    if (warps == 8) return launch_stream_decode_warps<T, kHeadDim, 8>(args, grid, stream);
  }
  check::require(warps == 4, "batch_decode: no streamed decode kernel for ", warps,
                 " consumer warps at head_dim ", kHeadDim);
  launch_stream_decode_warps<T, kHeadDim, 4>(args, grid, stream);
}

}  // namespace flashpage::cuda
