#pragma once
// Thin wrappers over the sm_90a PTX of the Hopper prefill: mbarriers, cp.async with mbarrier
// completion, proxy fences, named barriers, register reallocation and the wgmma fences.
//
// Every body is compiled only for sm_90a (FP_HOPPER_DEVICE: wgmma and setmaxnreg exist only
// there, not on plain sm_90 nor later families); elsewhere the wrappers are empty, the kernel
// that calls them is empty too (kernel.cuh) and the host never launches it
// (prefill_hopper_covers). Names live in their own namespace: src/cuda/ptx*.cuh define
// similarly named helpers for other kernels.
#include <cstdint>

#include "cuda/ptx.cuh"
#include "cuda/ptx_sm90.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FP_HOPPER_DEVICE 1
#endif

namespace flashpage::cuda::prefill_hopper::sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// ---- mbarriers: the project's sm_90 wrappers (src/cuda/ptx_sm90.cuh), shared with the
// streamed decode kernel ---------------------------------------------------------------------
using ptx::fence_barrier_init;
using ptx::mbarrier_arrive;
using ptx::mbarrier_arrive_expect_tx;
using ptx::mbarrier_init;
using ptx::mbarrier_wait;
using ptx::tma_load_3d;

// ---- cp.async into shared memory ---------------------------------------------------------

// 16-byte global -> shared copy, L1 bypassed (.cg: K/V/Q are streamed, L2 keeps the reuse).
// valid == false zero-fills the 16 bytes without reading src (src-size 0).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
#if defined(FP_HOPPER_DEVICE)
  const uint32_t src_bytes = valid ? 16u : 0u;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
#endif
}

// One arrival once this thread's earlier cp.async have landed (ptx_sm90.cuh, shared with the
// decode producer).
using ptx::cp_async_arrive_noinc;

__device__ __forceinline__ void cp_async_wait_all() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// cp.async writes shared memory through the generic proxy, wgmma reads it through the async
// proxy: after waiting on a "full" barrier, and before the wgmma that reads those bytes, the
// reading thread orders the two proxies (PTX ISA, wgmma.mma_async: "accessing the same memory
// location across multiple proxies needs a cross-proxy fence ... fence.proxy.async").
__device__ __forceinline__ void fence_proxy_async() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// ---- TMA stores (the FLASHPAGE_PREFILL_O_TMA experiment, o_tma.h) -------------------------

// One box of a 4-D tensor map at c0..c3 from shared memory `src`, in this thread's bulk group.
__device__ __forceinline__ void tma_store_4d(const void* map, uint32_t src, int c0, int c1, int c2,
                                             int c3) {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
               ::"l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
#endif
}
__device__ __forceinline__ void bulk_commit_group() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Until this thread's bulk groups have read their shared memory (it may then be rewritten).
__device__ __forceinline__ void bulk_wait_read_all() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}
// Until this thread's bulk groups have completed, their global writes included.
__device__ __forceinline__ void bulk_wait_all() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}

// ---- named barriers (ids 1..15; 0 is __syncthreads) ---------------------------------------

__device__ __forceinline__ void named_sync(uint32_t id, uint32_t threads) {
#if defined(FP_HOPPER_DEVICE)
  ptx::named_barrier_sync(id, threads);
#endif
}
__device__ __forceinline__ void named_arrive(uint32_t id, uint32_t threads) {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#endif
}

// ---- register reallocation between warpgroups -----------------------------------------------

// All four warps of a warpgroup execute the same one. The block's register file is the pool:
// the kernel is compiled at 168 registers per thread (384 threads, 1 block per SM), the load
// warpgroup gives registers back, the math warpgroups take them.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0);
#if defined(FP_HOPPER_DEVICE)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0);
#if defined(FP_HOPPER_DEVICE)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// ---- clusters of two blocks (the FLASHPAGE_PREFILL_CLUSTER experiment, scheduler.cuh) -----

// This block's rank in its cluster (0 in a launch without clusters: a cluster of one). Not
// volatile: a constant of the block, so the compiler may read it once.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank = 0;
#if defined(FP_HOPPER_DEVICE)
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
#endif
  return rank;
}

// Every thread of both blocks: what each did before is visible to the other after.
__device__ __forceinline__ void cluster_sync() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// One arrival on the mbarrier at CTA-relative shared address `bar` of block `cta` of the
// cluster. The default semantics (release at CTA scope), as CUTLASS's multicast pipelines
// release a stage to its producers: a cluster-scope release could wait for this thread's
// outstanding global stores (the epilogue's) too.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar, uint32_t cta) {
#if defined(FP_HOPPER_DEVICE)
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
#endif
}

// TMA: one box of a 3-D tensor map into shared address `dst` of every block in `cta_mask`,
// each block's copy completing on its own barrier at the same CTA-relative address `bar`.
__device__ __forceinline__ void tma_load_3d_multicast(uint32_t dst, const void* map, uint32_t bar,
                                                      int c0, int c1, int c2, uint16_t cta_mask) {
#if defined(FP_HOPPER_DEVICE)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
#endif
}

// ---- wgmma ordering ------------------------------------------------------------------------

// Required before the first wgmma of a batch whenever its accumulator or A registers were
// written by ordinary instructions since the last wgmma (softmax, rescale, P conversion).
__device__ __forceinline__ void wgmma_fence() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if defined(FP_HOPPER_DEVICE)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Keeps the compiler from moving reads or writes of wgmma registers across the asm
// statements above (they are asynchronous: only wgmma_wait makes them safe to touch).
template <int kRows, int kCols>
__device__ __forceinline__ void fence_operands(float (&r)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
}
template <int kRows, int kCols>
__device__ __forceinline__ void fence_operands(uint32_t (&r)[kRows][kCols]) {
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

}  // namespace flashpage::cuda::prefill_hopper::sm90
