#pragma once
// The per-instance launch functions: declared here for the dispatcher (prefill_tc.cu),
// defined in prefill_tc_launch.cuh and instantiated once per translation unit
// (prefill_tc_bf16.cu, prefill_tc_f16.cu), so the instances compile in parallel.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashpage::cuda::prefill_tc {

struct KernelArgs;

template <class T, int kHeadDim>
void launch(const KernelArgs& args, int64_t grid, cudaStream_t stream);

}  // namespace flashpage::cuda::prefill_tc
