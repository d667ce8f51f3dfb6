#pragma once
// The Hopper prefill kernel: one block of a load warpgroup and two math warpgroups (three
// for some head_dim 64 calls: smem_layout.h) per SM, persistent over the virtual tiles
// (scheduler.cuh).
//   warpgroup 0    the load warpgroup (producer.cuh), registers cut to RegisterSplit::kProducer
//   warpgroups 1+  the math warpgroups (consumer_mainloop.cuh), registers raised to
//                  RegisterSplit::kConsumer: S and O accumulators (64 + 64 floats at head_dim
//                  128, 32 + 128 at 256) plus P (32; 16) stay in registers
// With two math warpgroups the register pool of a block is 384 x 168 (the kernel is compiled
// for 168 registers per thread by __launch_bounds__(384, 1)); 128 x 56 + 256 x 224 = 64512 =
// 384 x 168 fits it exactly, so setmaxnreg.inc never waits on registers that are not coming.
//
// The body exists only for sm_90a (wgmma, setmaxnreg); other targets compile an empty kernel
// that the host never launches (prefill_hopper_covers).
#include <cstdint>

#include "cuda/prefill_hopper/consumer_mainloop.cuh"
#include "cuda/prefill_hopper/pipeline.cuh"
#include "cuda/prefill_hopper/producer.cuh"
#include "cuda/prefill_hopper/scheduler.cuh"
#include "cuda/prefill_hopper/sm90_ptx.cuh"
#include "cuda/prefill_hopper/smem_layout.h"

namespace flashpage::cuda::prefill_hopper {

// The register split per math warpgroup count (ptxas allocates each side within its
// setmaxnreg value). Three (head_dim 64): 512 threads launch with 128 each, and
// 128 x 32 + 384 x 160 = 65536, the whole file. The consumers hold S 64 +
// O 32 + P 32 floats at head_dim 64 and spilled at 152 (wgmma serialised: C7512) and at 160
// 20 bytes; the load warpgroup needs ~48-56 and spills at 32 (bench/NOTES.md, session 33).
template <int kMathWarpgroups>
struct RegisterSplit {
  static constexpr int kProducer = kMathWarpgroups == 3 ? 32 : 56;
  static constexpr int kConsumer = kMathWarpgroups == 3 ? 160 : 224;
  static constexpr int kAtLaunch = 65536 / (128 * (1 + kMathWarpgroups)) / 8 * 8;
  static_assert(128 * kProducer + 128 * kMathWarpgroups * kConsumer <=
                128 * (1 + kMathWarpgroups) * kAtLaunch);
};
static_assert(RegisterSplit<2>::kAtLaunch == 168 && RegisterSplit<3>::kAtLaunch == 128);

// kPairs (only in a FLASHPAGE_PREFILL_CLUSTER build): launched in clusters of two blocks that
// share K/V tiles (scheduler.cuh, cluster_pair).
template <class T, int kHeadDim, bool kPairs = false, int kMathWarpgroups = 2>
__global__ void __launch_bounds__(TileConfig<kHeadDim, kMathWarpgroups>::kThreads, 1)
    prefill_hopper_kernel(const __grid_constant__ HopperArgs args) {
#if defined(FP_HOPPER_DEVICE)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const SmemPlan<kHeadDim, kMathWarpgroups> plan(smem_raw);
  if (threadIdx.x == 0) plan.init_barriers(kPairs);
  __syncthreads();
  // The peer's barriers exist before anything signals them.
  if constexpr (kPairs) sm90::cluster_sync();
  // Warp-uniform by construction (one shuffle source), as setmaxnreg requires.
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  using Regs = RegisterSplit<kMathWarpgroups>;
  if (warpgroup == 0) {
    sm90::setmaxnreg_dec<Regs::kProducer>();
    const int warp = int(threadIdx.x) / 32;
    Producer<T, kHeadDim, kPairs, kMathWarpgroups>{args, plan, warp, int(threadIdx.x) & 31}.run();
  } else {
    sm90::setmaxnreg_inc<Regs::kConsumer>();
    Consumer<T, kHeadDim, kPairs, kMathWarpgroups>(args, plan, warpgroup - 1).run();
  }
  if constexpr (kPairs) {
    // Neither block leaves while the other may still arrive on its barriers.
    __syncwarp();
    sm90::cluster_sync();
  }
#endif
}

}  // namespace flashpage::cuda::prefill_hopper
