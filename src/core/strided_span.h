#pragma once
// Elements a strided view spans from its first element (non-negative strides): the storage
// it may address. Used to check views against their storage and to size TMA maps.
#include <cstddef>
#include <cstdint>

#include "flashpage/tensor.h"

namespace flashpage::detail {

inline size_t span_elements(const Shape& shape, const Shape& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return size_t(last + 1);
}

inline int64_t span_elements(const Tensor& t) {
  return int64_t(span_elements(t.shape(), t.strides()));
}

}  // namespace flashpage::detail
