// append_paged_kv / gather_paged_kv on the CPU: element copies through the page table
// (pages and k/v share a dtype; any strides on the contiguous side).
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/dispatch.h"
#include "cpu/paged_view.h"

namespace flashpage::cpu {

namespace {

// d elements from src (stride `stride`) to dst (stride 1 in the pages), or the reverse.
template <class T>
inline void copy_row(T* dst, int64_t dst_stride, const T* src, int64_t src_stride, int64_t d) {
  if (dst_stride == 1 && src_stride == 1) {
    std::memcpy(dst, src, size_t(d) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < d; ++i) dst[i * dst_stride] = src[i * src_stride];
}

template <class T>
void append_typed(const Tensor& k, const Tensor& v, const Tensor& batch_indices,
                  const Tensor& positions, const PagedKv& kv) {
  const PagedView<T> view(kv);
  const int32_t* rows = batch_indices.data_as<int32_t>();
  const int32_t* pos = positions.data_as<int32_t>();
  const int64_t bi_stride = batch_indices.stride(0), pos_stride = positions.stride(0);
  // [N, Hkv, D] or [B, S, Hkv, D]: token n sits at (n / S, n % S).
  const bool four = k.dim() == 4;
  const int64_t s_len = four ? k.size(1) : 1;
  const int64_t n_tokens = four ? k.size(0) * k.size(1) : k.size(0);
  const int64_t hkv = kv.num_kv_heads(), d = kv.head_dim();
  auto token_offset = [&](const Tensor& t, int64_t n, int64_t h) {
    return four ? (n / s_len) * t.stride(0) + (n % s_len) * t.stride(1) + h * t.stride(2)
                : n * t.stride(0) + h * t.stride(1);
  };
  const T* kp = static_cast<const T*>(k.data());
  const T* vp = static_cast<const T*>(v.data());
  const int64_t kd = k.stride(-1), vd = v.stride(-1);
  const int64_t pd = kv.k_pages.stride(3), pvd = kv.v_pages.stride(3);
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < n_tokens * hkv; ++task) {
    const int64_t n = task / hkv, h = task % hkv;
    const int64_t b = rows[n * bi_stride], p = pos[n * pos_stride];
    copy_row(view.k(b, p, h), pd, kp + token_offset(k, n, h), kd, d);
    copy_row(view.v(b, p, h), pvd, vp + token_offset(v, n, h), vd, d);
  }
}

template <class T>
void gather_typed(const PagedKv& kv, Tensor& k_out, Tensor& v_out) {
  const PagedView<T> view(kv);
  const int64_t batch = view.batch_size(), hkv = kv.num_kv_heads(), d = kv.head_dim();
  std::vector<int64_t> starts(size_t(batch) + 1, 0);
  for (int64_t b = 0; b < batch; ++b) starts[size_t(b) + 1] = starts[size_t(b)] + view.length(b);
  const int64_t total = starts.back();
  T* ko = static_cast<T*>(k_out.data());
  T* vo = static_cast<T*>(v_out.data());
  const int64_t pd = kv.k_pages.stride(3), pvd = kv.v_pages.stride(3);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < total; ++n) {
    const int64_t b =
        int64_t(std::upper_bound(starts.begin(), starts.end(), n) - starts.begin()) - 1;
    const int64_t t = n - starts[size_t(b)];
    for (int64_t h = 0; h < hkv; ++h) {
      copy_row(ko + n * k_out.stride(0) + h * k_out.stride(1), k_out.stride(2), view.k(b, t, h),
               pd, d);
      copy_row(vo + n * v_out.stride(0) + h * v_out.stride(1), v_out.stride(2), view.v(b, t, h),
               pvd, d);
    }
  }
}

}  // namespace

void append_paged_kv(const Tensor& k, const Tensor& v, const Tensor& batch_indices,
                     const Tensor& positions, const PagedKv& kv) {
  dispatch_float(kv.k_pages.dtype(), [&](auto tag) {
    append_typed<typename decltype(tag)::type>(k, v, batch_indices, positions, kv);
  });
}

void gather_paged_kv(const PagedKv& kv, Tensor& k_out, Tensor& v_out) {
  dispatch_float(kv.k_pages.dtype(), [&](auto tag) {
    gather_typed<typename decltype(tag)::type>(kv, k_out, v_out);
  });
}

}  // namespace flashpage::cpu
