// batch_decode: validation, then the CPU or CUDA run.
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

// q [B, Hq, D] or [B, Hq, 1, D] -> [B, Hq, D].
Tensor decode_query_view(const Tensor& q, std::string_view name) {
  check::require(q.defined() && (q.dim() == 3 || q.dim() == 4), name,
                 ": expected 3 dims [B,Hq,D] or 4 dims [B,Hq,1,D], got ", q.shape_str());
  if (q.dim() == 3) return q;
  check::require(q.size(2) == 1, name, ": expected [B,Hq,1,D] (one query token per row), got ",
                 q.shape_str());
  return q.select(2, 0);
}

}  // namespace

void batch_decode(Workspace& ws, const Plan& plan, const Tensor& q_in, const PagedKv& kv,
                  const AttentionParams& params, Tensor& out_in, const Tensor& lse,
                  void* stream) {
  check_pages(kv);
  const Device device = kv.k_pages.device();
  check_page_table_shapes(kv.table, device, "kv.table");
  const Tensor q = decode_query_view(q_in, "query");
  ops_detail::check_operand(q, "query", kv.k_pages.dtype(), "k_pages", device);
  const int64_t batch = q.size(0), hq = q.size(1), d = q.size(2), hkv = kv.num_kv_heads();
  check::require(d == kv.head_dim(), "query: expected head_dim ", kv.head_dim(),
                 " (as k_pages) in the last dim, got ", q_in.shape_str());
  check::gqa(hq, hkv);
  check::require(batch == kv.table.batch_size(), "query: expected batch size ",
                 kv.table.batch_size(), " (rows of kv.table) in dim 0, got ", q_in.shape_str());
  ops_detail::check_workspace(ws, device);
  ops_detail::check_plan(ws, plan, Plan::Kind::decode, device);
  ops_detail::check_plan_shape(plan, batch, hq, hkv, d, kv.page_size());
  // out: [B, Hq, D] or [B, Hq, 1, D], whichever form q has.
  check::require(out_in.defined() && (out_in.shape() == q.shape() ||
                                      out_in.shape() == Shape{batch, hq, 1, d}),
                 "out: expected shape [", batch, ",", hq, ",", d, "] [B,Hq,D] or [", batch, ",",
                 hq, ",1,", d, "] [B,Hq,1,D] (as query), got ", out_in.shape_str());
  Tensor out = decode_query_view(out_in, "out");
  ops_detail::check_out(out, q, "[B,Hq,D]");
  ops_detail::check_lse(lse, {batch, hq}, "[B,Hq]", device);
  ops_detail::check_outputs_apart(
      out, lse, {{&q, "query"}, {&kv.k_pages, "k_pages"}, {&kv.v_pages, "v_pages"}});
  const AttentionParams resolved = ops_detail::resolve_params(params, d);

  if (device.is_cpu()) {
    // Cheap next to the attention itself, and it keeps a malformed or changed table from
    // reading outside the pages.
    const std::vector<int64_t> lengths =
        check_page_table(kv.table, kv.num_pages(), kv.page_size());
    ops_detail::check_decode_items(ws, plan, lengths);
    cpu::batch_decode(ws.impl(), plan, q, kv, resolved, out, lse);
    return;
  }
#ifdef FLASHPAGE_WITH_CUDA
  const detail::DeviceScope scope(device);
  // Size-1 dims' strides as a contiguous tensor's, so that e.g. B = 1 from DLPack keeps the
  // fast kernels (core/unit_strides.h).
  Tensor out_view = detail::natural_unit_strides(out);
  cuda::batch_decode(ws.impl(), plan, detail::natural_unit_strides(q), kv, resolved, out_view,
                     detail::natural_unit_strides(lse), stream);
#else
  (void)stream;
  ops_detail::no_cuda("batch_decode");
#endif
}

Tensor batch_decode(const Tensor& q, const PagedKv& kv, const AttentionParams& params,
                    Tensor* lse) {
  // Only what is needed before planning: plan_decode checks the pages and the table's values,
  // the run checks everything else.
  check_pages(kv);
  const Device device = kv.k_pages.device();
  check_page_table_shapes(kv.table, device, "kv.table");
  const Tensor q3 = decode_query_view(q, "query");
  Workspace ws(device, one_shot_workspace_bytes(kv.table.batch_size()));
  const Plan plan = plan_decode(ws, kv.table.to(Device::cpu()), kv, q3.size(1));
  Tensor out = Tensor::empty(q.shape(), q.dtype(), device);
  Tensor lse_out;
  if (lse) lse_out = Tensor::empty({q3.size(0), q3.size(1)}, DType::f32, device);
  batch_decode(ws, plan, q, kv, params, out, lse_out);
  if (lse) *lse = lse_out;
  return out;
}

}  // namespace flashpage
