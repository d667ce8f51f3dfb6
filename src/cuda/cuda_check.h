#pragma once
// Checked CUDA runtime calls: a failure becomes flashpage::Error naming the call and CUDA's
// message. Host-only; include from .cu or .cpp files compiled against the CUDA runtime.
#include <cuda_runtime_api.h>

#include <string>

#include "flashpage/error.h"

namespace flashpage::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  throw Error(std::string("CUDA error in ") + call + " (" + file + ":" + std::to_string(line) +
              "): " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    throw_cuda_error(status, call, file, line);
  }
}

}  // namespace flashpage::cuda

#define FP_CUDA_CHECK(call) ::flashpage::cuda::check_cuda((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches bad launch configurations without synchronising.
#define FP_CUDA_CHECK_LAUNCH() FP_CUDA_CHECK(cudaGetLastError())
