// sdpa: validation (PyTorch's broadcasting rules for the mask), then the CPU or CUDA run.
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

namespace {

void check_sdpa_mask(const Tensor& mask, const AttentionParams& params, const Shape& target,
                     Device device) {
  if (!mask.defined()) return;
  check::require(!params.causal,
                 "mask: expected no mask with causal=true (mask and causal together are an "
                 "error, as in PyTorch), got ", mask.str());
  ops_detail::check_mask_dtype(mask);
  check::same_device(mask, "mask", device, "query");
  const std::string want = "a shape broadcastable to [B,Hq,S,L] = " + shape_to_string(target) +
                           " (1 to 4 dims aligned right, each 1 or equal)";
  check::require(mask.dim() >= 1 && mask.dim() <= 4, "mask: expected ", want, ", got ",
                 mask.shape_str());
  const int64_t offset = 4 - mask.dim();
  for (int64_t k = 0; k < mask.dim(); ++k)
    check::require(mask.size(k) == 1 || mask.size(k) == target[size_t(k + offset)],
                   "mask: expected ", want, ", got ", mask.shape_str());
}

}  // namespace

void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
          const AttentionParams& params, Tensor& out, const Tensor& lse, void* stream) {
  ops_detail::check_qkv(q, k, v, 4, "[B,Hq,S,D]", "[B,Hkv,L,D]");
  const Device device = q.device();
  const int64_t batch = q.size(0), hq = q.size(1), s = q.size(2), d = q.size(3);
  const int64_t hkv = k.size(1), l = k.size(2);
  check::head_dim(d, "query");
  check::size_is(k, "key", 0, batch, "batch size of query");
  check::size_is(k, "key", 3, d, "head_dim of query");
  check::gqa(hq, hkv);
  check_sdpa_mask(mask, params, {batch, hq, s, l}, device);
  ops_detail::check_out(out, q, "[B,Hq,S,D]");
  ops_detail::check_lse(lse, {batch, hq, s}, "[B,Hq,S]", device);
  ops_detail::check_outputs_apart(
      out, lse, {{&q, "query"}, {&k, "key"}, {&v, "value"}, {&mask, "mask"}});
  const AttentionParams resolved = ops_detail::resolve_params(params, d, std::max(s, l));
  // A key-padding row [L] is the [1, L] mask (the row broadcasts over S): the form both
  // devices' kernels take.
  const Tensor m = mask.defined() && mask.dim() == 1
                       ? mask.as_strided({1, mask.size(0)}, {0, mask.stride(0)})
                       : mask;

  if (device.is_cpu()) {
    cpu::sdpa(q, k, v, m, resolved, out, lse);
    return;
  }
#ifdef FLASHPAGE_WITH_CUDA
  const detail::DeviceScope scope(device);
  Tensor out_view = detail::natural_unit_strides(out);  // core/unit_strides.h
  cuda::sdpa(detail::natural_unit_strides(q), detail::natural_unit_strides(k),
             detail::natural_unit_strides(v), m, resolved, out_view,
             detail::natural_unit_strides(lse), stream);
#else
  (void)stream;
  ops_detail::no_cuda("sdpa");
#endif
}

Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
            const AttentionParams& params, Tensor* lse) {
  check::dims(q, "query", 4, "[B,Hq,S,D]");
  check::attention_dtype(q, "query");
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse_out;
  if (lse) lse_out = Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32, q.device());
  sdpa(q, k, v, mask, params, out, lse_out);
  if (lse) *lse = lse_out;
  return out;
}

}  // namespace flashpage
