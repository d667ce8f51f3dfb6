// Contiguous attention with PyTorch's semantics on the CPU: q [B, Hq, S, D] against
// k/v [B, Hkv, L, D]; causal is top-left; masks broadcast to [B, Hq, S, L].
#include "cpu/cpu_ops.h"
#include "cpu/dispatch.h"
#include "cpu/mask_view.h"
#include "cpu/paged_view.h"
#include "cpu/prefill_driver.h"

namespace flashpage::cpu {

namespace {

template <class T>
struct SdpaProblem {
  const T* qp;
  const T* kp;
  const T* vp;
  T* o;
  float* l;
  int64_t s_len, l_len;
  int64_t qs[3], ks[3], vs[3], os[3], ls[3];  // strides of (batch, head, token)
  MaskView mask_view;

  RowShape shape(int64_t) const { return RowShape{s_len, l_len, 0}; }
  StridedKv<T> kv(int64_t b) const {
    return StridedKv<T>(kp + b * ks[0], vp + b * vs[0], ks[2], vs[2], ks[1], vs[1]);
  }
  const T* q(int64_t b, int64_t i, int64_t h) const {
    return qp + b * qs[0] + h * qs[1] + i * qs[2];
  }
  T* out(int64_t b, int64_t i, int64_t h) const { return o + b * os[0] + h * os[1] + i * os[2]; }
  float* lse(int64_t b, int64_t i, int64_t h) const {
    return l ? l + b * ls[0] + h * ls[1] + i * ls[2] : nullptr;
  }
  MaskRow mask(int64_t b, int64_t h, int64_t i) const { return mask_view.row(b, h, i); }
};

template <class T>
void sdpa_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                const AttentionParams& params, Tensor& out, const Tensor& lse) {
  SdpaProblem<T> pb{static_cast<const T*>(q.data()), static_cast<const T*>(k.data()),
                    static_cast<const T*>(v.data()), static_cast<T*>(out.data()),
                    lse.defined() ? lse.data_as<float>() : nullptr, q.size(2), k.size(2),
                    {}, {}, {}, {}, {}, MaskView::broadcast(mask)};
  for (int i = 0; i < 3; ++i) {
    pb.qs[i] = q.stride(i);
    pb.ks[i] = k.stride(i);
    pb.vs[i] = v.stride(i);
    pb.os[i] = out.stride(i);
    pb.ls[i] = lse.defined() ? lse.stride(i) : 0;
  }
  const std::vector<int64_t> q_lens(size_t(q.size(0)), q.size(2));
  const std::vector<WorkItem> items = query_tiles(q_lens, 16);
  const int64_t hkv = k.size(1);
  run_prefill<T>(pb, items.data(), int64_t(items.size()), hkv, q.size(1) / hkv, q.size(3),
                 params, params.causal);
}

}  // namespace

void sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
          const AttentionParams& params, Tensor& out, const Tensor& lse) {
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    sdpa_typed<T>(q, k, v, mask, params, out, lse);
  });
}

}  // namespace flashpage::cpu
