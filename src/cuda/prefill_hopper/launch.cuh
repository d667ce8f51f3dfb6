#pragma once
// Host launch of one (dtype, head_dim) instance of the Hopper prefill kernel.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/check.h"

#include "cuda/cuda_check.h"
#include "cuda/kernel_attributes.h"
#include "cuda/prefill_hopper/kernel.cuh"
#include "cuda/prefill_hopper/launch.h"

namespace flashpage::cuda::prefill_hopper {

// The cluster kernel (FLASHPAGE_PREFILL_CLUSTER builds): `grid` blocks in clusters of two
// (an even number), cut to the clusters the device holds at once (the schedule is
// persistent).
template <class T, int kHeadDim>
void launch_pairs(const HopperArgs& args, int grid, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  constexpr auto kernel = &prefill_hopper_kernel<T, kHeadDim, true>;
  allow_shared_memory<kernel>(Cfg::kSmemLaunchBytes);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(grid));
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = Cfg::kSmemLaunchBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 2;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  // Asked once (an experiment: the first device's answer serves every device).
  static const int clusters = [&] {
    int n = 0;
    FP_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &config));
    return n;
  }();
  check::require(clusters >= 1, "prefill: no cluster of two blocks fits this device");
  config.gridDim = dim3(unsigned(2 * std::min(grid / 2, clusters)));
  FP_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args));
}

template <class T, int kHeadDim, int kMathWarpgroups>
void launch(const HopperArgs& args, int grid, cudaStream_t stream) {
  if constexpr (kClusterBuild && kMathWarpgroups == 2) {
    if (args.cluster) return launch_pairs<T, kHeadDim>(args, grid, stream);
  }
  using Cfg = TileConfig<kHeadDim, kMathWarpgroups>;
  constexpr auto kernel = &prefill_hopper_kernel<T, kHeadDim, false, kMathWarpgroups>;
  allow_shared_memory<kernel>(Cfg::kSmemLaunchBytes);
  kernel<<<unsigned(grid), Cfg::kThreads, Cfg::kSmemLaunchBytes, stream>>>(args);
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda::prefill_hopper
