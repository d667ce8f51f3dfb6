#pragma once
// The CPU implementations. Called by src/ops/ after validation: shapes, dtypes, devices and
// page tables are consistent, params.scale > 0 is resolved, q is [B, Hq, D] for decode.
#include "flashpage/ops.h"
#include "ops/workspace.h"

namespace flashpage::cpu {

void batch_decode(const Workspace::Impl& ws, const Plan& plan, const Tensor& q, const PagedKv& kv,
                  const AttentionParams& params, Tensor& out, const Tensor& lse);
void batch_prefill_paged(const Workspace::Impl& ws, const Plan& plan, const Tensor& q,
                         const Tensor& qo_indptr, const PagedKv& kv, const Tensor& mask,
                         const AttentionParams& params, Tensor& out, const Tensor& lse);
void batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& qo_indptr, const Tensor& kv_indptr,
                          const AttentionParams& params, Tensor& out, const Tensor& lse);
void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
          const AttentionParams& params, Tensor& out, const Tensor& lse);
void append_paged_kv(const Tensor& k, const Tensor& v, const Tensor& batch_indices,
                     const Tensor& positions, const PagedKv& kv);
void gather_paged_kv(const PagedKv& kv, Tensor& k_out, Tensor& v_out);
void merge_states(const Tensor& v_a, const Tensor& lse_a, const Tensor& v_b, const Tensor& lse_b,
                  Tensor& v_out, const Tensor& lse_out);

}  // namespace flashpage::cpu
