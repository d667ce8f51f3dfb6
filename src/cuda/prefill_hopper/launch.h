#pragma once
// Per-instance launch functions: declared for the host dispatcher (prefill_hopper.cu), defined
// in launch.cuh and instantiated once per translation unit (prefill_hopper_{bf16,f16}.cu), so
// the instances compile in parallel.
#include <cuda_runtime_api.h>

namespace flashpage::cuda::prefill_hopper {

struct HopperArgs;

// kMathWarpgroups: 2, or 3 at head_dim 64 (smem_layout.h).
template <class T, int kHeadDim, int kMathWarpgroups = 2>
void launch(const HopperArgs& args, int grid, cudaStream_t stream);

}  // namespace flashpage::cuda::prefill_hopper
