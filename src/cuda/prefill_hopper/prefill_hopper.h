#pragma once
// Hopper (sm_90a) prefill, FlashAttention-3 style: wgmma tensor cores, a load warpgroup
// feeding shared memory through cp.async + mbarriers, two math warpgroups with register
// reallocation (setmaxnreg), persistent over M tiles. Same launch record and semantics as the
// mma.sync kernel (prefill_tc.h); the dispatcher (prefill.cu) offers it every call first.
//
// Covered (prefill_hopper_covers; run_prefill_hopper returns false for the rest, launching
// nothing): a device of compute capability 9.0 with sm_90a code in this build; f16/bf16;
// head_dim 64, 128 or 256; no explicit mask (causal top-left or bottom-right, window_left and
// logits_soft_cap are covered); paged K/V (any page size, NHD or HND) or contiguous K/V
// (uniform or kv_indptr); uniform or ragged (qo_indptr) queries, with or without the plan's
// work list; any group size Hq / Hkv; LSE; 16-byte aligned q/k/v/out and strides that are
// multiples of 8 elements.
#include <cuda_runtime_api.h>

#include "cuda/prefill_tc/prefill_tc.h"

namespace flashpage::cuda {

bool prefill_hopper_covers(const PrefillTcParams& params);
bool run_prefill_hopper(const PrefillTcParams& params, cudaStream_t stream);
// The FLASHPAGE_PREFILL_CLUSTER experiment (scheduler.cuh): whether this build has it, and
// whether the calling thread's last run_prefill_hopper launched its cluster kernel.
bool prefill_hopper_cluster_build();
bool prefill_hopper_last_ran_pairs();
// The math warpgroups (2 or 3: warpgroup_choice.h) of the calling thread's last
// run_prefill_hopper launch; 0 before any.
int prefill_hopper_last_math_warpgroups();

}  // namespace flashpage::cuda
