#pragma once
// Host launch of one (dtype, head_dim) instance; instantiated by prefill_tc_{bf16,f16}.cu.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/kernel_attributes.h"
#include "cuda/prefill_tc/launch.h"
#include "cuda/prefill_tc/prefill_tc_kernel.cuh"

namespace flashpage::cuda::prefill_tc {

template <class T, int kHeadDim>
void launch(const KernelArgs& args, int64_t grid, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  constexpr auto kernel = &prefill_tc_kernel<T, kHeadDim>;
  allow_shared_memory<kernel>(Cfg::kSmemBytes);
  kernel<<<unsigned(grid), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda::prefill_tc
