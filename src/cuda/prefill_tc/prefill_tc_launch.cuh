#pragma once
// Host launch of one (dtype, head_dim) instance; instantiated by prefill_tc_{bf16,f16}.cu.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/prefill_tc/launch.h"
#include "cuda/prefill_tc/prefill_tc_kernel.cuh"

namespace flashpage::cuda::prefill_tc {

template <class T, int kHeadDim>
void launch(const KernelArgs& args, int64_t grid, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  auto* kernel = &prefill_tc_kernel<T, kHeadDim>;
  // More than 48 KiB of dynamic shared memory must be opted into, once per device.
  static std::atomic<uint64_t> configured{0};
  int device = 0;
  FP_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t(1) << (device & 63);
  if ((configured.load(std::memory_order_acquire) & bit) == 0) {
    FP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::kSmemBytes));
    configured.fetch_or(bit, std::memory_order_acq_rel);
  }
  kernel<<<unsigned(grid), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda::prefill_tc
