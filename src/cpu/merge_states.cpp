// merge_states on the CPU: two (out, lse) partials over disjoint keys -> one, per (n, head),
// through the same SoftmaxState the attention kernels use.
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/dispatch.h"
#include "cpu/softmax_state.h"

namespace flashpage::cpu {

namespace {

void load_row(const Tensor& t, int64_t n, int64_t h, float* dst) {
  const int64_t d = t.size(2), off = n * t.stride(0) + h * t.stride(1), s = t.stride(2);
  dispatch_float(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    load_strided_f32(static_cast<const T*>(t.data()) + off, d, s, dst);
  });
}

}  // namespace

void merge_states(const Tensor& v_a, const Tensor& lse_a, const Tensor& v_b, const Tensor& lse_b,
                  Tensor& v_out, const Tensor& lse_out) {
  const int64_t n_rows = v_a.size(0), heads = v_a.size(1), d = v_a.size(2);
  const float* la = lse_a.data_as<float>();
  const float* lb = lse_b.data_as<float>();
  float* lo = lse_out.defined() ? lse_out.data_as<float>() : nullptr;
#pragma omp parallel
  {
    std::vector<float> scratch(size_t(3 * d));  // a, b, accumulator: once per thread
    float* a = scratch.data();
    float* b = a + d;
    float* acc = b + d;
#pragma omp for schedule(static)
    for (int64_t task = 0; task < n_rows * heads; ++task) {
      const int64_t n = task / heads, h = task % heads;
      load_row(v_a, n, h, a);
      load_row(v_b, n, h, b);
      SoftmaxState state;
      state.init(acc, d);
      state.merge_normalized(a, la[n * lse_a.stride(0) + h * lse_a.stride(1)]);
      state.merge_normalized(b, lb[n * lse_b.stride(0) + h * lse_b.stride(1)]);
      dispatch_float(v_out.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        state.finalize(static_cast<T*>(v_out.data()) + n * v_out.stride(0) + h * v_out.stride(1),
                       v_out.stride(2));
      });
      if (lo) lo[n * lse_out.stride(0) + h * lse_out.stride(1)] = state.lse();
    }
  }
}

}  // namespace flashpage::cpu
