// batch_prefill_ragged: validation, then the CPU or CUDA run.
#include <algorithm>

#include "core/check.h"
#include "core/device_memory.h"
#include "core/unit_strides.h"
#include "cpu/cpu_ops.h"
#include "ops/validate.h"
#ifdef FLASHPAGE_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

namespace flashpage {

void batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& qo_indptr, const Tensor& kv_indptr,
                          const AttentionParams& params, Tensor& out, const Tensor& lse,
                          void* stream) {
  ops_detail::check_qkv(q, k, v, 3, "[Nq,Hq,D]", "[Nkv,Hkv,D]");
  const Device device = q.device();
  const int64_t nq = q.size(0), hq = q.size(1), d = q.size(2), nkv = k.size(0), hkv = k.size(1);
  check::head_dim(d, "query");
  check::size_is(k, "key", 2, d, "head_dim of query");
  check::gqa(hq, hkv);
  check::require(qo_indptr.defined() && qo_indptr.dim() == 1 && qo_indptr.numel() >= 1,
                 "qo_indptr: expected 1 dim [B+1] with at least 1 entry, got ",
                 qo_indptr.shape_str());
  const int64_t batch = qo_indptr.numel() - 1;
  check::index_vector(qo_indptr, "qo_indptr", batch + 1, "B+1", device);
  if (kv_indptr.defined())
    check::index_vector(kv_indptr, "kv_indptr", batch + 1, "B+1, as qo_indptr", device);
  ops_detail::check_out(out, q, "[Nq,Hq,D]");
  ops_detail::check_lse(lse, {nq, hq}, "[Nq,Hq]", device);
  ops_detail::check_outputs_apart(out, lse, {{&q, "query"}, {&k, "key"}, {&v, "value"}});
  const AttentionParams resolved = ops_detail::resolve_params(params, d, std::max(nq, nkv));

  if (device.is_cpu()) {
    check::indptr_values(qo_indptr, "qo_indptr", nq, "query tokens Nq");
    if (kv_indptr.defined())
      check::indptr_values(kv_indptr, "kv_indptr", nkv, "key tokens Nkv");
    else
      check::indptr_values(qo_indptr, "qo_indptr", nkv,
                           "key tokens Nkv: kv_indptr undefined means kv_indptr = qo_indptr");
    cpu::batch_prefill_ragged(q, k, v, qo_indptr, kv_indptr, resolved, out, lse);
    return;
  }
#ifdef FLASHPAGE_WITH_CUDA
  const detail::DeviceScope scope(device);
  Tensor out_view = detail::natural_unit_strides(out);  // core/unit_strides.h
  cuda::batch_prefill_ragged(detail::natural_unit_strides(q), detail::natural_unit_strides(k),
                             detail::natural_unit_strides(v), qo_indptr, kv_indptr, resolved,
                             out_view, detail::natural_unit_strides(lse), stream);
#else
  (void)stream;
  ops_detail::no_cuda("batch_prefill_ragged");
#endif
}

Tensor batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& qo_indptr, const Tensor& kv_indptr,
                            const AttentionParams& params, Tensor* lse) {
  check::dims(q, "query", 3, "[Nq,Hq,D]");
  check::attention_dtype(q, "query");
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse_out;
  if (lse) lse_out = Tensor::empty({q.size(0), q.size(1)}, DType::f32, q.device());
  batch_prefill_ragged(q, k, v, qo_indptr, kv_indptr, params, out, lse_out);
  if (lse) *lse = lse_out;
  return out;
}

}  // namespace flashpage
