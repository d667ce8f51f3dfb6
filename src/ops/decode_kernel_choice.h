#pragma once
// Which decode kernel a (device, dtype, head dim) runs: one function answers both the
// planner (which work-list format to write) and the run (which kernel to launch), so they
// cannot disagree. The choice is recorded in the workspace header (int 3) by the planner.
#include <cstdint>

#include "flashpage/device.h"
#include "flashpage/dtype.h"

namespace flashpage {

enum class DecodeKernel : int32_t {
  cpu = 0,      // the CPU implementation (split work list)
  split = 1,    // CUDA split-KV kernel, sm_80+ (decode_kernel.cuh): one block per item x head
  stream = 2,   // CUDA streamed kernel, sm_90 (decode_stream_kernel.cuh): persistent blocks
  generic = 3,  // CUDA generic kernel (f32, other head dims): whole rows, no work list
};

// FLASHPAGE_DECODE_KERNEL=split forces the split kernel on sm_90 (for A/B benchmarks).
DecodeKernel choose_decode_kernel(Device device, DType dtype, int64_t head_dim);

const char* decode_kernel_name(DecodeKernel kernel);

}  // namespace flashpage
