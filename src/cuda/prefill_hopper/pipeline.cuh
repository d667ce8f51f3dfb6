#pragma once
// The shared-memory plan of a block (tile and mbarrier addresses) and the ring positions that
// producer and consumers step through in the same order.
//
// Each buffer (Q stage i; K stage i; V stage i) has a "full" barrier (expects one arrival per
// producer thread: cp.async.mbarrier.arrive.noinc, when that thread's copies have landed, or
// for a K/V slice loaded by TMA a plain arrival, lane 0's announcing the slice's bytes as
// the phase's transactions; Q's one more, a plain arrival, with release semantics, after the
// stage's tile slot was written)
// and an "empty" barrier (one arrival per consumer thread, after its warpgroup's last wgmma
// reading the buffer has completed; for Q, after the epilogue that staged O in it, or with
// one Q stage after the tile's last S GEMM). Use u of
// a buffer (u = 0, 1, ...) waits for full phase u, i.e. parity u & 1; the producer's use u
// waits for empty phase u - 1, parity (u & 1) ^ 1, which passes at once for u = 0 (a fresh
// barrier counts its "preceding" phase as complete).
#include <cstdint>

#include "cuda/prefill_hopper/sm90_ptx.cuh"
#include "cuda/prefill_hopper/smem_layout.h"

namespace flashpage::cuda::prefill_hopper {

constexpr uint32_t kProducerThreads = 128;
constexpr uint32_t kBarrierBytes = 8;

template <int kStages>
struct Ring {
  int stage = 0;
  uint32_t phase = 0;  // parity of the full phase this use waits for

  __device__ __forceinline__ uint32_t bar(uint32_t base) const { return base + kBarrierBytes * stage; }
  __device__ __forceinline__ void wait_full(uint32_t base) const { sm90::mbarrier_wait(bar(base), phase); }
  __device__ __forceinline__ void wait_empty(uint32_t base) const {
    sm90::mbarrier_wait(bar(base), phase ^ 1u);
  }
  // The tile slot of a Q ring's use (SmemPlan::tile_slot), without another register: the
  // stage, or for a one-stage ring the parity of the uses so far (the phase).
  __device__ __forceinline__ int slot() const { return kStages == 1 ? int(phase) : stage; }
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

template <int kHeadDim, int kMathWarpgroups = 2>
struct SmemPlan {
  using Cfg = TileConfig<kHeadDim, kMathWarpgroups>;
  uint8_t* base;  // 1024-byte aligned
  uint32_t q, k, v;
  uint32_t q_full, q_empty, k_full, k_empty, v_full, v_empty;  // first barrier of each array
  uint8_t* tile_slots;

  __device__ __forceinline__ explicit SmemPlan(uint8_t* raw) {
    const uint32_t raw_addr = sm90::smem_u32(raw);
    const uint32_t pad = (kSwizzleAtomBytes - (raw_addr % kSwizzleAtomBytes)) % kSwizzleAtomBytes;
    base = raw + pad;
    const uint32_t b = raw_addr + pad;
    q = b + Cfg::kQOffset;
    k = b + Cfg::kKOffset;
    v = b + Cfg::kVOffset;
    q_full = b + Cfg::kBarrierOffset;
    q_empty = q_full + kBarrierBytes * Cfg::kQStages;
    k_full = q_empty + kBarrierBytes * Cfg::kQStages;
    k_empty = k_full + kBarrierBytes * Cfg::kKStages;
    v_full = k_empty + kBarrierBytes * Cfg::kKStages;
    v_empty = v_full + kBarrierBytes * Cfg::kVStages;
    tile_slots = base + Cfg::kTileSlotOffset;
  }
  __device__ __forceinline__ uint32_t k_tile(int stage) const { return k + stage * Cfg::kKvBytes; }
  __device__ __forceinline__ uint32_t v_tile(int stage) const { return v + stage * Cfg::kKvBytes; }
  __device__ __forceinline__ uint32_t q_tile(int stage) const { return q + stage * Cfg::kQBytes; }
  // TileSlot i (scheduler.cuh): M tile number j of the block uses slot j % kTileSlots
  // (Ring::slot of the Q ring).
  __device__ __forceinline__ uint8_t* tile_slot(int i) const {
    return tile_slots + i * kTileSlotBytes;
  }
  // The epilogue's staging buffer: the tile's Q stage, or with kEarlyQRelease math warp
  // `warp`'s own (0 .. 7).
  __device__ __forceinline__ uint8_t* o_staging(int q_stage) const {
    return base + Cfg::kQOffset + q_stage * Cfg::kQBytes;
  }
  __device__ __forceinline__ uint8_t* o_warp_staging(int warp) const {
    return base + Cfg::kOStagingOffset + warp * Cfg::kOStagingWarpBytes;
  }

  // One thread, before the block's first __syncthreads. `cluster`: the K/V stages are
  // multicast to both blocks of a cluster, and each consumer warp of the peer block also
  // arrives once on this block's K/V "empty" barriers (Consumer::release_kv).
  __device__ __forceinline__ void init_barriers(bool cluster = false) const {
    constexpr uint32_t kConsumerThreads = Cfg::kConsumerThreads;
    const uint32_t kv_releases = kConsumerThreads + (cluster ? kConsumerThreads / 32 : 0u);
    for (int i = 0; i < Cfg::kQStages; ++i) {
      // + 1: the producer thread that wrote the stage's tile slot arrives once more.
      sm90::mbarrier_init(q_full + kBarrierBytes * i, kProducerThreads + 1);
      sm90::mbarrier_init(q_empty + kBarrierBytes * i, kConsumerThreads);
    }
    for (int i = 0; i < Cfg::kKStages; ++i) {
      sm90::mbarrier_init(k_full + kBarrierBytes * i, kProducerThreads);
      sm90::mbarrier_init(k_empty + kBarrierBytes * i, kv_releases);
    }
    for (int i = 0; i < Cfg::kVStages; ++i) {
      sm90::mbarrier_init(v_full + kBarrierBytes * i, kProducerThreads);
      sm90::mbarrier_init(v_empty + kBarrierBytes * i, kv_releases);
    }
    sm90::fence_barrier_init();
  }
};

}  // namespace flashpage::cuda::prefill_hopper
