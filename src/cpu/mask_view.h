#pragma once
// Read access to an attention mask seen as [B, H, S, L] (broadcast dims have stride 0).
// bool masks keep `true`; float masks (f32/f16/bf16) are added to the logits.
#include <cstdint>
#include <limits>

#include "cpu/simd.h"
#include "flashpage/tensor.h"

namespace flashpage::cpu {

// One query row of the mask: element j (key index) at ptr + j * stride.
struct MaskRow {
  const char* ptr = nullptr;  // nullptr: no mask
  int64_t stride = 0;         // elements
  DType dtype = DType::f32;

  // s[0..n) are the logits of keys j0 .. j0+n-1.
  void apply(int64_t j0, int n, float* s) const {
    if (!ptr) return;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    switch (dtype) {
      case DType::boolean: {
        const auto* m = reinterpret_cast<const uint8_t*>(ptr);
        for (int j = 0; j < n; ++j)
          if (!m[(j0 + j) * stride]) s[j] = kNegInf;
        break;
      }
      case DType::f32: add(reinterpret_cast<const float*>(ptr), j0, n, s); break;
      case DType::f16: add(reinterpret_cast<const F16*>(ptr), j0, n, s); break;
      case DType::bf16: add(reinterpret_cast<const Bf16*>(ptr), j0, n, s); break;
      default: break;  // rejected by validation
    }
  }

 private:
  template <class T>
  void add(const T* m, int64_t j0, int n, float* s) const {
    for (int j = 0; j < n; ++j) s[j] += to_f32(m[(j0 + j) * stride]);
  }
};

class MaskView {
 public:
  MaskView() = default;
  // dims maps the mask's dims onto (b, h, s, l): dims[k] in 0..3 for mask dim k; a size-1
  // dim broadcasts.
  MaskView(const Tensor& mask, const int (&dims)[4]) {
    if (!mask.defined()) return;
    base_ = static_cast<const char*>(mask.data());
    dtype_ = mask.dtype();
    for (int k = 0; k < mask.dim(); ++k)
      if (mask.size(k) != 1) strides_[dims[k]] = mask.stride(k);
  }
  // PyTorch broadcasting: the mask's dims align with the right end of [B, H, S, L].
  static MaskView broadcast(const Tensor& mask) {
    if (!mask.defined()) return {};
    int dims[4] = {0, 1, 2, 3};
    const int offset = 4 - int(mask.dim());
    for (int k = 0; k < int(mask.dim()); ++k) dims[k] = k + offset;
    return MaskView(mask, dims);
  }
  // Paged prefill masks: [S, L], [B, S, L] or [B, 1|H, S, L].
  static MaskView paged(const Tensor& mask) {
    if (!mask.defined()) return {};
    if (mask.dim() == 3) return MaskView(mask, {0, 2, 3, 3});
    return broadcast(mask);
  }

  bool defined() const { return base_ != nullptr; }
  MaskRow row(int64_t b, int64_t h, int64_t i) const {
    if (!base_) return {};
    const int64_t off = b * strides_[0] + h * strides_[1] + i * strides_[2];
    return {base_ + off * int64_t(dtype_size(dtype_)), strides_[3], dtype_};
  }

 private:
  const char* base_ = nullptr;
  DType dtype_ = DType::f32;
  int64_t strides_[4] = {0, 0, 0, 0};
};

}  // namespace flashpage::cpu
