#pragma once
// A consumer (math) warpgroup: 64 rows of each M tile, FlashAttention-3 style.
//
// Per M tile, K/V tiles n = n_end-1 down to n_begin (the partial / diagonal tiles first):
//   S_n = Q K_n^T          wgmma m64nBk16 (B = kBlockN keys), A = Q and B = K from shared
//                          memory (K-major)
//   softmax(S_n) -> P_n    in registers (consumer_softmax.cuh)
//   O += P_{n+1} V_{n+1}   wgmma m64nDk16, A = P from registers, B = V (MN-major)
// with the S GEMM of tile n issued before the P V GEMM of tile n + 1, so the softmax of S_n
// runs while the tensor cores still work on P_{n+1} V_{n+1} (intra-warpgroup overlap), and
// the warpgroups (two, or three at head_dim 64: warpgroup_choice.h) take turns issuing their
// GEMMs (named barriers 1 + wg), so one warpgroup's softmax overlaps the others' GEMMs
// (inter-warpgroup ping-pong). Where two Q stages allow, the same overlap continues across
// M tiles: the next tile's first S GEMM goes before this tile's last P V (run(), kCrossTile).
//
// Register rules of wgmma (PTX ISA 9.7.15): accumulators and A registers belong to the
// tensor cores from the wgmma until the wgmma_wait that covers it; ordinary writes to them
// must precede a wgmma_fence. fence_operands pins those points for the compiler.
#include <cstdint>
#include <type_traits>

#include "cuda/prefill_hopper/consumer_softmax.cuh"
#include "cuda/prefill_hopper/epilogue.cuh"
#include "cuda/prefill_hopper/pipeline.cuh"
#include "cuda/prefill_hopper/scheduler.cuh"
#include "cuda/prefill_hopper/sm90_ptx.cuh"
#include "cuda/prefill_hopper/smem_layout.h"
#include "cuda/prefill_hopper/wgmma_ops.cuh"
#include "cuda/ptx.cuh"

namespace flashpage::cuda::prefill_hopper {

constexpr uint32_t kSchedulerBarrier = 1;  // + consumer warpgroup (ids 1, 2; 3 with three)
// Each turn barrier joins the warpgroup waiting for its turn and the one passing it on.
constexpr uint32_t kTurnBarrierThreads = 256;

#ifndef FLASHPAGE_PREFILL_LATE_EPILOGUE
#define FLASHPAGE_PREFILL_LATE_EPILOGUE 0  // Consumer::kLateEpilogue
#endif
#ifndef FLASHPAGE_PREFILL_REG_EPILOGUE
#define FLASHPAGE_PREFILL_REG_EPILOGUE 0  // Consumer::finish, Epilogue::store_from_registers
#endif

// kPairs: the block runs a cluster's pairs of tiles (Producer, kernel.cuh).
template <class T, int kHeadDim, bool kPairs = false, int kMathWarpgroups = 2>
struct Consumer {
  using Cfg = TileConfig<kHeadDim, kMathWarpgroups>;
  using Epi = Epilogue<T, kHeadDim, kMathWarpgroups>;
  static constexpr int kBlockN = Cfg::kBlockN;
  static constexpr int kKeyTiles = Cfg::kKeyTiles;
  static constexpr int kDimTiles = Cfg::kDimTiles;
  static constexpr int kPvSteps = Cfg::kPvSteps;
  // f16 P keeps 11 bits: the degree-4 polynomial; bf16's 8 bits: degree 3 (exp2_poly.h).
  using TileSoftmax = RowSoftmax<kKeyTiles, kHeadDim == 64 ? FLASHPAGE_PREFILL_EXP_POLY : 0,
                                 std::is_same_v<T, __half> ? 4 : 3>;

  const HopperArgs& a;
  const SmemPlan<kHeadDim, kMathWarpgroups>& s;
  int wg, t, lane;

  __device__ __forceinline__ Consumer(const HopperArgs& args,
                                      const SmemPlan<kHeadDim, kMathWarpgroups>& plan,
                                      int warpgroup)
      : a(args), s(plan), wg(warpgroup) {
    t = int(threadIdx.x) - 128 * (1 + wg);
    lane = t & 31;
  }

  // ---- GEMMs -----------------------------------------------------------------------------

  // q_desc: this warpgroup's 64 rows of the tile's Q stage (TileRegs::q_desc).
  __device__ __forceinline__ void qk(float (&acc)[kKeyTiles][4], uint64_t q_desc,
                                     uint32_t k_tile) const {
    const uint64_t k_desc = k_major_desc(k_tile);
    sm90::fence_operands(acc);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
      const uint64_t da = q_desc + (k_major_step_offset(kk, Cfg::kBlockM) >> 4);
      const uint64_t db = k_desc + (k_major_step_offset(kk, kBlockN) >> 4);
      if constexpr (kBlockN == 128)
        sm90::wgmma_ss_m64n128k16(acc, da, db, kk > 0 ? 1u : 0u, T{});
      else
        sm90::wgmma_ss_m64n64k16(acc, da, db, kk > 0 ? 1u : 0u, T{});
    }
    sm90::wgmma_commit();
    sm90::fence_operands(acc);
  }

  __device__ __forceinline__ void pv(float (&o)[kDimTiles][4], uint32_t (&p)[kPvSteps][4],
                                     uint32_t v_tile) const {
    const uint64_t v_desc = mn_major_desc(v_tile, kBlockN);
    sm90::fence_operands(o);
    sm90::fence_operands(p);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kPvSteps; ++ks) {
      const uint64_t db = v_desc + (mn_major_step_offset(ks) >> 4);
      if constexpr (kHeadDim == 256)
        sm90::wgmma_rs_m64n256k16(o, p[ks], db, 1u, T{});
      else if constexpr (kHeadDim == 128)
        sm90::wgmma_rs_m64n128k16(o, p[ks], db, 1u, T{});
      else
        sm90::wgmma_rs_m64n64k16(o, p[ks], db, 1u, T{});
    }
    sm90::wgmma_commit();
    sm90::fence_operands(o);
    sm90::fence_operands(p);
  }

  // P (f32 probabilities in S's accumulators) -> the A registers of the P V steps: register r
  // of step ks is S accumulators (2ks + r/2, 2(r%2) .. +1) (smem_layout.h, "A from registers").
  static __device__ __forceinline__ void pack_p(uint32_t (&p)[kPvSteps][4],
                                                const float (&acc)[kKeyTiles][4]) {
#pragma unroll
    for (int ks = 0; ks < kPvSteps; ++ks) {
      p[ks][0] = ptx::pack2<T>(acc[2 * ks][0], acc[2 * ks][1]);
      p[ks][1] = ptx::pack2<T>(acc[2 * ks][2], acc[2 * ks][3]);
      p[ks][2] = ptx::pack2<T>(acc[2 * ks + 1][0], acc[2 * ks + 1][1]);
      p[ks][3] = ptx::pack2<T>(acc[2 * ks + 1][2], acc[2 * ks + 1][3]);
    }
  }

  // ---- one M tile ------------------------------------------------------------------------

  // Raw S of tile n -> what the softmax takes; returns its multiplier (see RowSoftmax).
  __device__ __forceinline__ float logits(float (&acc)[kKeyTiles][4], int n, const RowKeys& rk,
                                          const KeyRange& all) const {
    const int key0 = n * kBlockN;
    const bool interior = key0 >= all.lo && key0 + kBlockN <= all.hi;
    if (interior && !a.k.has_cap) return a.k.scale_log2;
    return mask_logits<kKeyTiles>(acc, a.k, rk, key0, lane);
  }

  // The turn goes round the math warpgroups: 0, 1, (2,) 0, ...
  __device__ __forceinline__ void sched_wait() const {
    if (a.pingpong) sm90::named_sync(kSchedulerBarrier + wg, kTurnBarrierThreads);
  }
  __device__ __forceinline__ void sched_pass() const {
    const int next = Cfg::kConsumerWarpgroups == 2 ? 1 - wg : wg == 2 ? 0 : wg + 1;
    if (a.pingpong) sm90::named_arrive(kSchedulerBarrier + next, kTurnBarrierThreads);
  }

  // ---- the sequence of M tiles --------------------------------------------------------------
  //
  // The producer's tile slots give the M tiles in order (scheduler.cuh, TileSlot). A tile's
  // slot and its Q stage stay valid until the consumers release the stage after the tile's
  // epilogue, so what the epilogue needs is read from the slot then, not kept in registers.
  //
  // With two Q stages (kCrossTile) consecutive tiles are pipelined: the next tile's first
  // S GEMM is issued before this tile's last P V, exactly as inside a tile, so the boundary
  // costs one ordinary iteration plus the epilogue instead of an unoverlapped P V, an
  // unoverlapped S GEMM and its softmax (a third of the math warpgroups' time at 8 K/V
  // tiles per M tile, bench/NOTES.md). With one Q stage (head_dim 256) the next tile's Q
  // cannot load before this tile's last S GEMM released the stage (kEarlyQRelease): tiles run
  // one after another, the next Q loading while this tile's last softmax, P V and epilogue run.
  static constexpr bool kCrossTile = Cfg::kQStages > 1;
  // A finished tile's epilogue behind the next tile's second S GEMM (run()), an experiment
  // built only with FLASHPAGE_PREFILL_LATE_EPILOGUE (a compile definition, so the default
  // kernel is not touched by it: bench/NOTES.md, session 25): 1 with three Q stages (head_dim
  // 64), 2 also with two (head_dim 128). The late epilogue also frees the tile's Q stage a
  // step later, and with two stages that is the stage the tile after next loads its Q into.
  // (The epilogue experiments build into the two-warpgroup kernels only: with three, at
  // 160 registers, they spill.)
  static constexpr bool kLateEpilogue =
      kCrossTile && kMathWarpgroups == 2 &&
      FLASHPAGE_PREFILL_LATE_EPILOGUE >= (Cfg::kQStages >= 3 ? 1 : 2);
  static constexpr bool kEarlyQRelease = Cfg::kEarlyQRelease;
  static_assert(!(kCrossTile && kEarlyQRelease), "the next tile's S GEMM needs this tile's slot");

  struct Rings {
    Ring<Cfg::kQStages> q;
    Ring<Cfg::kKStages> k;
    Ring<Cfg::kVStages> v;
  };

  // What the main loop of a tile needs in registers.
  struct TileRegs {
    int q_stage, slot, n_begin, n_end;
    uint64_t q_desc;  // this warpgroup's 64 rows of the tile's Q stage
    KeyRange all;     // keys every row of this warpgroup sees
    RowKeys rk;       // keys each of this thread's two rows sees
  };

  __device__ __forceinline__ const TileSlot& slot(int i) const {
    return *reinterpret_cast<const TileSlot*>(s.tile_slot(i));
  }
  // With three math warpgroups, a warpgroup none of whose 64 rows is in the tile (a range's
  // last, partly filled tile) computes nothing there: it takes its GEMM turns and consumes the
  // tile's K/V stages in step with the others (shadow_step and the rest below) and only frees
  // the Q stage at the end, so the other two run the tile as the two-warpgroup kernel would.
  static constexpr bool kIdleSkip = kMathWarpgroups == 3;
  __device__ __forceinline__ bool idle(const TileRegs& c) const {
    return kIdleSkip && slot(c.slot).tile.rows.count <= wg * Cfg::kWarpgroupRows;
  }
  // An idle warpgroup's K/V steps: the first tile's S (no turn), an overlapped step (a turn),
  // the last P V (no turn).
  __device__ __forceinline__ void shadow_k(Rings& r) const {
    r.k.wait_full(s.k_full);
    release_kv(r.k.bar(s.k_empty));
    r.k.advance();
  }
  __device__ __forceinline__ void shadow_v(Rings& r) const {
    r.v.wait_full(s.v_full);
    release_kv(r.v.bar(s.v_empty));
    r.v.advance();
  }
  __device__ __forceinline__ void shadow_step(Rings& r) const {
    shadow_k(r);
    sched_wait();
    sched_pass();
    shadow_v(r);
  }
  // Waits for the next Q stage (its Q and its tile's slot); returns the slot's state.
  __device__ __forceinline__ int acquire(Rings& r, int& q_stage, int& slot_index) const {
    r.q.wait_full(s.q_full);
    sm90::fence_proxy_async();
    q_stage = r.q.stage;
    slot_index = r.q.slot();  // the producer's slot for this use (Producer::publish)
    r.q.advance();
    return slot(slot_index).state;
  }
  __device__ __forceinline__ void release(int q_stage) const {
    sm90::mbarrier_arrive(s.q_empty + kBarrierBytes * uint32_t(q_stage));
  }
  // A K or V stage this warpgroup has finished reading ("empty" barrier `bar`); in a cluster
  // (kPairs) each warp also tells the peer block, whose producer refills the stage in
  // both blocks (pipeline.cuh, init_barriers).
  __device__ __forceinline__ void release_kv(uint32_t bar) const {
    sm90::mbarrier_arrive(bar);
    if constexpr (kPairs) {
      __syncwarp();
      if (lane == 0) sm90::mbarrier_arrive_cluster(bar, sm90::cluster_ctarank() ^ 1u);
    }
  }
  __device__ __forceinline__ void begin(TileRegs& c, int q_stage, int slot_index) const {
    const TileSlot& sl = slot(slot_index);
    c.q_stage = q_stage;
    c.slot = slot_index;
    c.n_begin = sl.tile.n_begin;
    c.n_end = sl.tile.n_end;
    c.all = sl.wg_all[wg];
    const int warp_row0 = wg * Cfg::kWarpgroupRows + (t >> 5) * 16;
    c.rk.init(a.k, sl.tile.g, sl.tile.rows, warp_row0 + (lane >> 2));
    c.q_desc = k_major_desc(s.q_tile(q_stage) +
                            uint32_t(wg * Cfg::kWarpgroupRows * kSwizzleRowBytes));
  }
  // The tile's epilogue: O staged in its Q stage, then the stage is free; or, with the stage
  // already released (kEarlyQRelease), O staged in the warp's own buffer.
  __device__ __forceinline__ void finish(const TileRegs& c, const float (&o)[kDimTiles][4],
                                         const TileSoftmax& softmax) const {
    const bool stores = (a.ablate & 4) == 0;
    if (a.ablate & 8) {  // timing experiment: no epilogue
      if constexpr (!kEarlyQRelease) release(c.q_stage);
      return;
    }
    if constexpr (kEarlyQRelease) {
      Epi{a.k, s.o_warp_staging((t >> 5) | (wg << 2)), wg, t, stores}
          .store_warp_staged(slot(c.slot).tile, o, softmax.m, softmax.d);
    } else if constexpr (FLASHPAGE_PREFILL_REG_EPILOGUE != 0 && kMathWarpgroups == 2) {
      Epi{a.k, nullptr, wg, t, stores}.store_from_registers(
          slot(c.slot).tile, o, softmax.m, softmax.d, [&] { release(c.q_stage); });
    } else {
      // Two spellings, not one with a member that is null by default: that member, even
      // unused, changed the default kernel's PTX (session 29).
#if FLASHPAGE_PREFILL_O_TMA
      Epi{a.k, s.o_staging(c.q_stage), wg, t, stores, kMathWarpgroups == 2 ? &a.o_tma : nullptr}
          .store(slot(c.slot).tile, o, softmax.m, softmax.d);
#else
      Epi{a.k, s.o_staging(c.q_stage), wg, t, stores}.store(
          slot(c.slot).tile, o, softmax.m, softmax.d);
#endif
      release(c.q_stage);
    }
  }
  // kEarlyQRelease: the tile's last S GEMM (K/V tile n_begin) has completed; nothing reads
  // its Q stage any more.
  __device__ __forceinline__ void release_early(const TileRegs& c, int n) const {
    if constexpr (kEarlyQRelease)
      if (n == c.n_begin) release(c.q_stage);
  }

  static __device__ __forceinline__ void zero(float (&o)[kDimTiles][4]) {
#pragma unroll
    for (int dt = 0; dt < kDimTiles; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  }

  struct NothingBetween {
    __device__ __forceinline__ void operator()() const {}
  };

  // S of K/V tile n of tile c issued before O += P V of the previous K/V tile (p: of this M
  // tile, or of the previous one at a tile boundary); `softmax(acc, n)` runs on S between
  // the two waits, while the P V may still run. On return the P V has completed and the K
  // and V stages are released. `between` (the previous tile's epilogue, run()) runs after
  // the S GEMM is issued and before the P V is: the tensor cores work on S meanwhile, and
  // the other warpgroup has the turn.
  template <class Softmax, class Between = NothingBetween>
  __device__ __forceinline__ void overlapped_step(Rings& r, const TileRegs& c, int n,
                                                  float (&acc)[kKeyTiles][4],
                                                  float (&o)[kDimTiles][4],
                                                  uint32_t (&p)[kPvSteps][4], Softmax&& softmax,
                                                  Between&& between = Between{}) const {
    constexpr bool kBetween = !std::is_same_v<std::decay_t<Between>, NothingBetween>;
    r.k.wait_full(s.k_full);
    sm90::fence_proxy_async();
    sched_wait();
    qk(acc, c.q_desc, s.k_tile(r.k.stage));
    if constexpr (kBetween) {
      sched_pass();
      between();
    }
    r.v.wait_full(s.v_full);
    sm90::fence_proxy_async();
    pv(o, p, s.v_tile(r.v.stage));
    if constexpr (!kBetween) sched_pass();
    sm90::wgmma_wait<1>();  // S_n is done (the P V may still run)
    sm90::fence_operands(acc);
    release_kv(r.k.bar(s.k_empty));
    r.k.advance();
    softmax(acc, n);
    sm90::wgmma_wait<0>();  // P V done: O and P are ours again
    sm90::fence_operands(o);
    sm90::fence_operands(p);
    release_kv(r.v.bar(s.v_empty));
    r.v.advance();
  }

  // The cross-tile step of a warpgroup idle in this tile and not in the next: the next tile's
  // first S GEMM on its turn, and this tile's last V stage consumed unread.
  template <class Softmax>
  __device__ __forceinline__ void first_step_alone(Rings& r, const TileRegs& next,
                                                   float (&acc)[kKeyTiles][4],
                                                   Softmax&& softmax) const {
    r.k.wait_full(s.k_full);
    sm90::fence_proxy_async();
    sched_wait();
    qk(acc, next.q_desc, s.k_tile(r.k.stage));
    sched_pass();
    shadow_v(r);
    sm90::wgmma_wait<0>();
    sm90::fence_operands(acc);
    release_kv(r.k.bar(s.k_empty));
    r.k.advance();
    softmax(acc, next.n_end - 1);
  }
  // The cross-tile step of a warpgroup idle in the next tile and not in this one: this tile's
  // last P V on its turn, and the next tile's first K stage consumed unread.
  __device__ __forceinline__ void last_step_alone(Rings& r, float (&o)[kDimTiles][4],
                                                  uint32_t (&p)[kPvSteps][4]) const {
    shadow_k(r);
    r.v.wait_full(s.v_full);
    sm90::fence_proxy_async();
    sched_wait();
    pv(o, p, s.v_tile(r.v.stage));
    sched_pass();
    sm90::wgmma_wait<0>();
    sm90::fence_operands(o);
    sm90::fence_operands(p);
    release_kv(r.v.bar(s.v_empty));
    r.v.advance();
  }

  __device__ __forceinline__ void run() const {
    // Warpgroup 0 issues first: the pending arrival on its own barrier lets its first
    // sched_wait pass (afterwards each warpgroup passes the turn once per overlapped step).
    if (wg == 0 && a.pingpong) sm90::named_arrive(kSchedulerBarrier, kTurnBarrierThreads);
    Rings r;
    TileSoftmax softmax;
    float o[kDimTiles][4];
    float acc[kKeyTiles][4];
    uint32_t p[kPvSteps][4];
    float o_scale[2];
    TileRegs c;
    int q_stage, slot_index;
    int state = acquire(r, q_stage, slot_index);
    for (;;) {
      // No earlier tile's Q stage is held here, only the one just acquired: tiles no row of
      // which sees a key, the end, or a tile that starts alone.
      while (state == TileSlot::kEmpty) {
        Epi{a.k, nullptr, wg, t}.store_empty(slot(slot_index).tile);
        release(q_stage);
        state = acquire(r, q_stage, slot_index);
      }
      if (state == TileSlot::kDone) {
#if FLASHPAGE_PREFILL_O_TMA
        if ((t & 31) == 0) sm90::bulk_wait_all();  // the O stores' global writes, before exit
#endif
        return;
      }
      begin(c, q_stage, slot_index);
      softmax.init();
      zero(o);
      if (idle(c)) {
        shadow_k(r);
      } else {
        // First (highest) K/V tile: S, softmax, P; nothing to overlap with.
        r.k.wait_full(s.k_full);
        sm90::fence_proxy_async();
        qk(acc, c.q_desc, s.k_tile(r.k.stage));
        sm90::wgmma_wait<0>();
        sm90::fence_operands(acc);
        release_kv(r.k.bar(s.k_empty));
        r.k.advance();
        release_early(c, c.n_end - 1);
        softmax.update(acc, logits(acc, c.n_end - 1, c.rk, c.all), o_scale);
        pack_p(p, acc);
      }

      int n_first = c.n_end - 2;  // the tile's first K/V tile of the loop below
      for (;;) {
        const bool c_idle = idle(c);
        if (c_idle) {
          for (int n = n_first; n >= c.n_begin; --n) shadow_step(r);
        } else {
          for (int n = n_first; n >= c.n_begin; --n) {
            overlapped_step(r, c, n, acc, o, p, [&](float (&s_n)[kKeyTiles][4], int key_tile) {
              release_early(c, key_tile);
              if ((a.ablate & 1) == 0) {
                softmax.update(s_n, logits(s_n, key_tile, c.rk, c.all), o_scale);
              } else {
                o_scale[0] = o_scale[1] = 1.0f;
              }
            });
            rescale_rows(o, o_scale);
            pack_p(p, acc);
          }
        }
        if constexpr (kCrossTile) {
          state = acquire(r, q_stage, slot_index);  // the next tile's; this tile's still held
          if (state == TileSlot::kRun) {
            TileRegs next;
            begin(next, q_stage, slot_index);
            TileSoftmax next_softmax;
            next_softmax.init();
            const bool next_idle = idle(next);
            auto first_softmax = [&](float (&s_n)[kKeyTiles][4], int key_tile) {
              next_softmax.update(s_n, logits(s_n, key_tile, next.rk, next.all),
                                  o_scale);  // o_scale: O starts at zero
            };
            if (!c_idle && !next_idle) {
              // The next tile's first S GEMM beside this tile's last P V.
              overlapped_step(r, next, next.n_end - 1, acc, o, p, first_softmax);
            } else if (c_idle && next_idle) {
              shadow_step(r);
            } else if (c_idle) {
              first_step_alone(r, next, acc, first_softmax);
            } else {
              last_step_alone(r, o, p);
            }
            n_first = next.n_end - 2;
            if constexpr (kLateEpilogue) {
              if (n_first >= next.n_begin) {
                // This tile's epilogue behind the next tile's second S GEMM.
                pack_p(p, acc);
                overlapped_step(
                    r, next, n_first, acc, o, p,
                    [&](float (&s_n)[kKeyTiles][4], int key_tile) {
                      softmax.update(s_n, logits(s_n, key_tile, next.rk, next.all), o_scale);
                    },
                    [&] {
                      finish(c, o, softmax);
                      softmax = next_softmax;
                      zero(o);
                    });
                rescale_rows(o, o_scale);
                pack_p(p, acc);
                --n_first;
                c = next;
                continue;
              }
            }
            if (c_idle)
              release(c.q_stage);
            else
              finish(c, o, softmax);
            softmax = next_softmax;
            zero(o);
            pack_p(p, acc);
            c = next;
            continue;
          }
        }
        if (c_idle) {
          shadow_v(r);
          release(c.q_stage);
        } else {
          // The last P V of the tile, alone.
          r.v.wait_full(s.v_full);
          sm90::fence_proxy_async();
          pv(o, p, s.v_tile(r.v.stage));
          sm90::wgmma_wait<0>();
          sm90::fence_operands(o);
          release_kv(r.v.bar(s.v_empty));
          r.v.advance();
          finish(c, o, softmax);
        }
        if constexpr (!kCrossTile) state = acquire(r, q_stage, slot_index);
        break;
      }
    }
  }
};

}  // namespace flashpage::cuda::prefill_hopper
