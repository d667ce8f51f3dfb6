#pragma once
// The CUDA implementations (src/cuda/); each takes the stream last. The decode
// run reads the work list from the device copy in ws (no host reads, no allocation). Called by src/ops/ after validation: shapes, dtypes, devices and
// page tables are consistent, params.scale > 0 is resolved, q is [B, Hq, D] for decode.
#include "flashpage/ops.h"
#include "ops/workspace.h"

namespace flashpage::cuda {

void batch_decode(const Workspace::Impl& ws, const Plan& plan, const Tensor& q, const PagedKv& kv,
                  const AttentionParams& params, Tensor& out, const Tensor& lse,
                  void* stream);
// Whether the streamed sm_90 decode kernel was built for and runs on this device (its
// machine code targets sm_90 or later, and so does the device). Cached per device.
bool stream_decode_runs_on(int device_index);
void batch_prefill_paged(const Workspace::Impl& ws, const Plan& plan, const Tensor& q,
                         const Tensor& qo_indptr, const PagedKv& kv, const Tensor& mask,
                         const AttentionParams& params, Tensor& out, const Tensor& lse, void* stream);
void batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& qo_indptr, const Tensor& kv_indptr,
                          const AttentionParams& params, Tensor& out, const Tensor& lse, void* stream);
void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
          const AttentionParams& params, Tensor& out, const Tensor& lse, void* stream);
void append_paged_kv(const Tensor& k, const Tensor& v, const Tensor& batch_indices,
                     const Tensor& positions, const PagedKv& kv, void* stream);
void gather_paged_kv(const PagedKv& kv, Tensor& k_out, Tensor& v_out, void* stream);
void merge_states(const Tensor& v_a, const Tensor& lse_a, const Tensor& v_b, const Tensor& lse_b,
                  Tensor& v_out, const Tensor& lse_out, void* stream);

}  // namespace flashpage::cuda
