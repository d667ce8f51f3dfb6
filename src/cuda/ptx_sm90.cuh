#pragma once
// Thin wrappers over the Hopper (sm_90) PTX of the streamed kernels: shared-memory mbarriers
// and 1-D bulk async copies (the copy engine behind TMA) that complete on an mbarrier's
// transaction count. Each wrapper compiles to nothing below sm_90; callers only reach them on
// sm_90+ (the host picks the kernel from the device's compute capability).
#include <cstdint>

namespace flashpage::cuda::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHPAGE_SM90_PTX 1
#endif

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#endif
}

// Makes the barrier initialisations visible to the async proxy (the copy engine) before any
// copy signals them; a __syncthreads() then publishes them to the other threads.
__device__ __forceinline__ void fence_barrier_init() {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// Orders this thread's earlier generic-proxy shared-memory writes before later async-proxy
// accesses (bulk copies into the same bytes).
__device__ __forceinline__ void fence_proxy_async_shared() {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// One arrival (release semantics: this thread's earlier shared reads are done before it).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// One arrival that also announces `bytes` of bulk-copy data the phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
#endif
}

// The barrier receives one arrival once all of this thread's earlier cp.async have landed.
// .noinc: that arrival counts against the barrier's expected count (it is initialised with
// the number of copying threads), rather than being balanced by an extra pending count.
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Spins until the phase of parity `parity` has completed (acquire: the data it guarded is
// visible afterwards). A fresh barrier counts its (virtual) phase of parity 1 as complete,
// so a producer's first wait on an "empty" barrier with parity 1 passes at once. The lanes
// of a warp read the same barrier word and leave together; the __syncwarp makes that
// reconvergence explicit before the .sync.aligned instructions (wgmma, bar) that follow.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
#ifdef FLASHPAGE_SM90_PTX
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
  __syncwarp();
}

// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to
// shared memory; completion is counted on `bar`'s transaction count. A CTA's own shared
// address is valid in the shared::cluster window (a launch without clusters is a cluster of 1).
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes,
                                              uint32_t bar) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#endif
}

// Same, with an L2 eviction-priority hint (the policy from createpolicy below): streamed K/V
// is read once per step, so it should not push out the page table and queries.
__device__ __forceinline__ void bulk_copy_g2s_hint(uint32_t dst, const void* src, uint32_t bytes,
                                                   uint32_t bar, uint64_t policy) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], "
      "%2, [%3], %4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
#endif
}

// TMA: one box of a 3-D tensor map (src/cuda/tensor_map.h) at coordinates (c0, c1, c2) ->
// shared memory at dst (laid out as the map's swizzle says), completion counted on `bar`'s
// transaction count. `map`: the generic address of a CUtensorMap in global, constant or
// __grid_constant__ parameter memory.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, uint32_t bar, int c0,
                                            int c1, int c2) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#endif
}

// TMA: one box of a 5-D tensor map at coordinates c[0..4], with an L2 cache-policy hint.
__device__ __forceinline__ void tma_load_5d_hint(uint32_t dst, const void* map, uint32_t bar,
                                                 int c0, int c1, int c2, int c3, int c4,
                                                 uint64_t policy) {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;\n" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "l"(policy)
      : "memory");
#endif
}

__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy = 0;
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

// In a kernel launched with programmatic stream serialisation: waits until the grids before
// it have completed and their memory is visible. (Triggering the dependents early from the
// decode kernel, griddepcontrol.launch_dependents, made the merge 4-7 µs slower: session 16.)
__device__ __forceinline__ void griddepcontrol_wait() {
#ifdef FLASHPAGE_SM90_PTX
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashpage::cuda::ptx
