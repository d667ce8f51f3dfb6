#pragma once
// Host launch of one (dtype, head_dim) instance of the Hopper prefill kernel.
#include <cuda_runtime_api.h>

#include "cuda/cuda_check.h"
#include "cuda/kernel_attributes.h"
#include "cuda/prefill_hopper/kernel.cuh"
#include "cuda/prefill_hopper/launch.h"

namespace flashpage::cuda::prefill_hopper {

template <class T, int kHeadDim>
void launch(const HopperArgs& args, int grid, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  constexpr auto kernel = &prefill_hopper_kernel<T, kHeadDim>;
  allow_shared_memory<kernel>(Cfg::kSmemLaunchBytes);
  kernel<<<unsigned(grid), Cfg::kThreads, Cfg::kSmemLaunchBytes, stream>>>(args);
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda::prefill_hopper
