#pragma once
// Shared-memory opt-in for kernels that use more than 48 KB per block, done once per
// (kernel, device) so launches on the hot path stay free of attribute calls.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "cuda/cuda_check.h"

namespace flashpage::cuda {

// Raises kKernel's dynamic shared-memory limit to `bytes` and asks for the largest
// shared-memory carveout, so as many blocks fit per SM as the planners count on
// (DecodeTiling::blocks_per_sm): left to itself the driver may pick a smaller carveout.
template <auto kKernel>
void allow_shared_memory(int bytes) {
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  FP_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t(1) << (device & 63);
  if (configured_devices.load(std::memory_order_acquire) & bit) return;
  FP_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  FP_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  configured_devices.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace flashpage::cuda
