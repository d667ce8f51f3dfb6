// merge_states: validation, then the CPU or CUDA run.
#include "core/check.h"
#include "core/device_memory.h"
#include "cpu/cpu_ops.h"
#include "ops/validate.h"
#ifdef FLASHPAGE_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

namespace flashpage {

void merge_states(const Tensor& v_a, const Tensor& lse_a, const Tensor& v_b, const Tensor& lse_b,
                  Tensor& v_out, const Tensor& lse_out, void* stream) {
  check::dims(v_a, "v_a", 3, "[N,H,D]");
  const Device device = v_a.device();
  const Shape lse_shape{v_a.size(0), v_a.size(1)};
  for (const auto& [t, name] :
       {std::pair{&v_a, "v_a"}, std::pair{&v_b, "v_b"}, std::pair{static_cast<const Tensor*>(&v_out), "v_out"}}) {
    check::require(t->defined() && t->shape() == v_a.shape(), name, ": expected shape ",
                   v_a.shape_str(), " [N,H,D] (as v_a), got ", t->shape_str());
    check::attention_dtype(*t, name);
    check::same_device(*t, name, device, "v_a");
  }
  check::writable(v_out, "v_out");
  for (const auto& [t, name] :
       {std::pair{&lse_a, "lse_a"}, std::pair{&lse_b, "lse_b"}, std::pair{&lse_out, "lse_out"}}) {
    if (t == &lse_out && !t->defined()) continue;
    check::require(t->defined() && t->shape() == lse_shape, name, ": expected shape ",
                   shape_to_string(lse_shape), " [N,H], got ", t->shape_str());
    check::require(t->dtype() == DType::f32, name, ": expected dtype f32, got ",
                   dtype_name(t->dtype()));
    check::same_device(*t, name, device, "v_a");
  }
  if (lse_out.defined()) check::writable(lse_out, "lse_out");
  // Element-wise: an output may be exactly an input, not a shifted view of one.
  for (const auto& [in, name] : {std::pair{&v_a, "v_a"}, std::pair{&v_b, "v_b"}})
    check::no_overlap(v_out, "v_out", *in, name, /*exact_alias_ok=*/true);
  for (const auto& [in, name] : {std::pair{&lse_a, "lse_a"}, std::pair{&lse_b, "lse_b"}})
    check::no_overlap(lse_out, "lse_out", *in, name, /*exact_alias_ok=*/true);

  if (device.is_cpu()) {
    cpu::merge_states(v_a, lse_a, v_b, lse_b, v_out, lse_out);
    return;
  }
#ifdef FLASHPAGE_WITH_CUDA
  const detail::DeviceScope scope(device);
  cuda::merge_states(v_a, lse_a, v_b, lse_b, v_out, lse_out, stream);
#else
  (void)stream;
  ops_detail::no_cuda("merge_states");
#endif
}

}  // namespace flashpage
