#pragma once
// Size-1 dims address nothing, so their strides are arbitrary, and exporters write anything
// there (DLPack producers commonly write 1). The CUDA kernels' layout tests read every stride
// (16-byte vector strides, TMA maps), so such a view, B = 1 or S = 1 say, fell back to the slow
// generic kernel. natural_unit_strides gives each size-1 dim the stride a contiguous layout
// would have there (the next inner dim's stride times its size; 1 for the last dim): the same
// elements, and the routing sees what it would for a freshly allocated tensor.
#include <cstdint>

#include "flashpage/tensor.h"

namespace flashpage::detail {

// It runs before every CUDA call, so the usual view (no size-1 dim with another stride) comes
// back as it is, its strides not even copied.
inline Tensor natural_unit_strides(const Tensor& t) {
  if (!t.defined()) return t;
  Shape strides;        // a copy, made at the first stride that changes
  int64_t natural = 1;  // dim d's stride in a contiguous layout of the dims inside it
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t stride = t.stride(d);
    if (t.size(d) == 1 && stride != natural) {
      if (strides.empty()) strides = t.strides();
      stride = strides[size_t(d)] = natural;
    }
    natural = stride * t.size(d);
  }
  return strides.empty() ? t : t.as_strided(t.shape(), strides);
}

}  // namespace flashpage::detail
