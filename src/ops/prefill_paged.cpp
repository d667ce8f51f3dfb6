// batch_prefill_paged: validation, then the CPU or CUDA run.
#include <algorithm>

#include "core/check.h"
#include "core/device_memory.h"
#include "core/unit_strides.h"
#include "cpu/cpu_ops.h"
#include "ops/page_table_check.h"
#include "ops/validate.h"
#include "ops/workspace.h"
#ifdef FLASHPAGE_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

namespace flashpage {

namespace {

// Uniform queries need [B, Hq, S, D]; ragged ones [N, Hq, D] with qo_indptr [B+1].
void check_prefill_query(const Tensor& q, const Tensor& qo_indptr, int64_t batch,
                         Device device) {
  if (qo_indptr.defined()) {
    check::dims(q, "query", 3, "[N,Hq,D] (ragged queries: qo_indptr given)");
    check::index_vector(qo_indptr, "qo_indptr", batch + 1, "B+1, B = rows of kv.table",
                        device);
  } else {
    check::dims(q, "query", 4, "[B,Hq,S,D] (uniform queries: qo_indptr undefined)");
    check::require(q.size(0) == batch, "query: expected batch size ", batch,
                   " (rows of kv.table) in dim 0, got ", q.shape_str());
  }
}

// [S, L], [B, S, L] or [B, 1|Hq, S, L], L = the longest row.
void check_prefill_mask(const Tensor& mask, const Tensor& qo_indptr, int64_t batch, int64_t hq,
                        int64_t s, int64_t longest, Device device) {
  if (!mask.defined()) return;
  check::require(!qo_indptr.defined(),
                 "mask: expected no mask with ragged queries (qo_indptr given); masks need "
                 "uniform queries [B,Hq,S,D], got ", mask.str());
  ops_detail::check_mask_dtype(mask);
  check::same_device(mask, "mask", device, "query");
  const std::string expected = "[S,L], [B,S,L] or [B,1|Hq,S,L] with S=" + std::to_string(s) +
                               ", L=" + std::to_string(longest) + " (the longest row), B=" +
                               std::to_string(batch) + ", Hq=" + std::to_string(hq);
  const Shape& m = mask.shape();
  bool ok = false;
  if (mask.dim() == 2) ok = m == Shape{s, longest};
  if (mask.dim() == 3) ok = m == Shape{batch, s, longest};
  if (mask.dim() == 4)
    ok = m[0] == batch && (m[1] == 1 || m[1] == hq) && m[2] == s && m[3] == longest;
  check::require(ok, "mask: expected ", expected, ", got ", mask.shape_str());
}

}  // namespace

void batch_prefill_paged(Workspace& ws, const Plan& plan, const Tensor& q,
                         const Tensor& qo_indptr, const PagedKv& kv, const Tensor& mask,
                         const AttentionParams& params, Tensor& out, const Tensor& lse,
                         void* stream) {
  check_pages(kv);
  const Device device = kv.k_pages.device();
  check_page_table_shapes(kv.table, device, "kv.table");
  const int64_t batch = kv.table.batch_size(), hkv = kv.num_kv_heads();
  check_prefill_query(q, qo_indptr, batch, device);
  ops_detail::check_operand(q, "query", kv.k_pages.dtype(), "k_pages", device);
  const bool ragged = qo_indptr.defined();
  const int64_t hq = q.size(1), d = q.size(-1);
  const int64_t s = ragged ? 0 : q.size(2);
  const int64_t total_rows = ragged ? q.size(0) : batch * s;
  check::require(d == kv.head_dim(), "query: expected head_dim ", kv.head_dim(),
                 " (as k_pages) in the last dim, got ", q.shape_str());
  check::gqa(hq, hkv);
  ops_detail::check_workspace(ws, device);
  ops_detail::check_plan(ws, plan, Plan::Kind::prefill, device);
  ops_detail::check_plan_shape(plan, batch, hq, hkv, d, kv.page_size());
  // A plan for uniform queries has no split; one for ragged queries keeps its own copy.
  check::require(ragged == (ws.impl().qo_indptr_offset >= 0), "plan: made for ",
                 ragged ? "uniform" : "ragged", " queries, got ", ragged ? "ragged" : "uniform",
                 " ones (", ragged ? "qo_indptr given" : "no qo_indptr",
                 "); call plan_prefill with the query form of the run");
  if (ragged)
    check::require(plan.total_q_rows <= total_rows, "query: expected at least ",
                   plan.total_q_rows, " tokens (qo_indptr[B] of the plan) in dim 0, got ",
                   q.shape_str());
  else
    check::require(plan.total_q_rows == total_rows, "plan: expected a plan for ", total_rows,
                   " query rows (B*S of the query), got one for ", plan.total_q_rows,
                   "; plan_prefill with qo_len_uniform = S");
  check_prefill_mask(mask, qo_indptr, batch, hq, s, ws.impl().max_kv_len, device);
  ops_detail::check_out(out, q, ragged ? "[N,Hq,D]" : "[B,Hq,S,D]");
  if (ragged)
    ops_detail::check_lse(lse, {q.size(0), hq}, "[N,Hq]", device);
  else
    ops_detail::check_lse(lse, {batch, hq, s}, "[B,Hq,S]", device);
  ops_detail::check_outputs_apart(out, lse,
                                  {{&q, "query"},
                                   {&kv.k_pages, "k_pages"},
                                   {&kv.v_pages, "v_pages"},
                                   {&mask, "mask"},
                                   {&qo_indptr, "qo_indptr"}});
  const AttentionParams resolved = ops_detail::resolve_params(
      params, d, INT32_MAX - total_rows);  // from the tensors, not the plan's table (see below)

  if (device.is_cpu()) {
    const std::vector<int64_t> lengths =
        check_page_table(kv.table, kv.num_pages(), kv.page_size());
    const int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
    check::require(!mask.defined() || longest == ws.impl().max_kv_len,
                   "plan: made for a different page table (longest row ", ws.impl().max_kv_len,
                   ", the table now has ", longest, "); call plan_prefill again");
    if (ragged) {
      check::indptr_values(qo_indptr, "qo_indptr", q.size(0), "query tokens N");
      const int32_t* p = qo_indptr.data_as<int32_t>();
      std::vector<int64_t> q_lens(static_cast<size_t>(batch));
      for (int64_t b = 0; b < batch; ++b) q_lens[size_t(b)] = p[b + 1] - p[b];
      ops_detail::check_prefill_items(ws, q_lens);
    }
    cpu::batch_prefill_paged(ws.impl(), plan, q, qo_indptr, kv, mask, resolved, out, lse);
    return;
  }
#ifdef FLASHPAGE_WITH_CUDA
  const detail::DeviceScope scope(device);
  Tensor out_view = detail::natural_unit_strides(out);  // core/unit_strides.h
  cuda::batch_prefill_paged(ws.impl(), plan, detail::natural_unit_strides(q), qo_indptr, kv, mask,
                            resolved, out_view, detail::natural_unit_strides(lse), stream);
#else
  (void)stream;
  ops_detail::no_cuda("batch_prefill_paged");
#endif
}

Tensor batch_prefill_paged(const Tensor& q, const Tensor& qo_indptr, const PagedKv& kv,
                           const Tensor& mask, const AttentionParams& params, Tensor* lse) {
  check_pages(kv);
  const Device device = kv.k_pages.device();
  check_page_table_shapes(kv.table, device, "kv.table");
  const int64_t batch = kv.table.batch_size();
  check_prefill_query(q, qo_indptr, batch, device);
  ops_detail::check_operand(q, "query", kv.k_pages.dtype(), "k_pages", device);
  const bool ragged = qo_indptr.defined();
  // Query tiles of 16 rows (the CPU's; CUDA's are 64) plus one partial tile per row.
  const int64_t query_rows = ragged ? q.size(0) : batch * q.size(2);
  Workspace ws(device, one_shot_workspace_bytes(batch, query_rows / 16 + batch));
  const Tensor host_qo = ragged ? qo_indptr.to(Device::cpu()) : Tensor();
  const Plan plan = plan_prefill(ws, host_qo, kv.table.to(Device::cpu()), kv,
                                 ragged ? 0 : q.size(2), q.size(1));
  Tensor out = Tensor::empty(q.shape(), q.dtype(), device);
  Tensor lse_out;
  if (lse)
    lse_out = ragged ? Tensor::empty({q.size(0), q.size(1)}, DType::f32, device)
                     : Tensor::empty({batch, q.size(1), q.size(2)}, DType::f32, device);
  batch_prefill_paged(ws, plan, q, qo_indptr, kv, mask, params, out, lse_out);
  if (lse) *lse = lse_out;
  return out;
}

}  // namespace flashpage
