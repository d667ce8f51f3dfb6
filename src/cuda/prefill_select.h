#pragma once
// Which CUDA prefill kernel runs a call (prefill.cu dispatches in this order):
//   hopper   src/cuda/prefill_hopper/ (wgmma, sm_90a), when prefill_hopper_covers the call
//   tc       src/cuda/prefill_tc/ (mma.sync), when prefill_tc_covers it
//   generic  src/cuda/generic_attention.cu, everything else
// FLASHPAGE_PREFILL_KERNEL=tc (read once per process) skips the Hopper kernel, so a benchmark
// can compare the two in one build.
#include "cuda/prefill_tc/prefill_tc.h"

namespace flashpage::cuda {

// hopper_pairs: the Hopper kernel on clusters of two blocks (the FLASHPAGE_PREFILL_CLUSTER
// experiment, prefill_hopper.h); run_prefill_hopper decides it per call, so only
// last_prefill_kernel reports it, never select_prefill_kernel.
enum class PrefillKernel { hopper, hopper_pairs, tc, generic };

PrefillKernel select_prefill_kernel(const PrefillTcParams& params);
const char* prefill_kernel_name(PrefillKernel kernel);
const char* prefill_kernel_name(const PrefillTcParams& params);
// The kernel the calling thread's latest CUDA prefill call launched ("none" before any): for
// tests and benchmarks that want to say what they measured.
const char* last_prefill_kernel();

}  // namespace flashpage::cuda
