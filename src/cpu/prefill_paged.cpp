// Paged prefill on the CPU: the plan's (row, query tile) items over the row's pages;
// uniform queries [B, Hq, S, D] or ragged [N, Hq, D] with qo_indptr. Causal is bottom-right.
#include "cpu/cpu_ops.h"
#include "cpu/dispatch.h"
#include "cpu/mask_view.h"
#include "cpu/paged_view.h"
#include "cpu/prefill_driver.h"

namespace flashpage::cpu {

namespace {

template <class T>
struct PagedProblem {
  PagedView<T> view;
  const int32_t* qo_indptr;  // nullptr: uniform
  int64_t q_len_uniform;
  const T* qp;
  T* o;
  float* l;
  int64_t qs[3], os[3], ls[3];  // strides of (row, head, token); ragged: row stride unused
  MaskView mask_view;

  int64_t q_start(int64_t b) const { return qo_indptr ? qo_indptr[b] : 0; }
  RowShape shape(int64_t b) const {
    RowShape s;
    s.q_len = qo_indptr ? qo_indptr[b + 1] - qo_indptr[b] : q_len_uniform;
    s.kv_len = view.length(b);
    s.offset = s.kv_len - s.q_len;
    return s;
  }
  typename PagedView<T>::Row kv(int64_t b) const { return view.row(b); }
  int64_t at(const int64_t* s, int64_t b, int64_t i, int64_t head) const {
    return b * s[0] + head * s[1] + (q_start(b) + i) * s[2];
  }
  const T* q(int64_t b, int64_t i, int64_t head) const { return qp + at(qs, b, i, head); }
  T* out(int64_t b, int64_t i, int64_t head) const { return o + at(os, b, i, head); }
  float* lse(int64_t b, int64_t i, int64_t head) const {
    return l ? l + at(ls, b, i, head) : nullptr;
  }
  MaskRow mask(int64_t b, int64_t head, int64_t i) const { return mask_view.row(b, head, i); }
};

template <class T>
void prefill_paged_typed(const Workspace::Impl& ws, const Plan& plan, const Tensor& q,
                         const Tensor& qo_indptr, const PagedKv& kv, const Tensor& mask,
                         const AttentionParams& params, Tensor& out, const Tensor& lse) {
  const bool ragged = qo_indptr.defined();
  PagedProblem<T> pb{PagedView<T>(kv), ragged ? qo_indptr.data_as<int32_t>() : nullptr,
                     ragged ? 0 : q.size(2), static_cast<const T*>(q.data()),
                     static_cast<T*>(out.data()), lse.defined() ? lse.data_as<float>() : nullptr,
                     {}, {}, {}, MaskView::paged(mask)};
  // (row, head, token) strides; ragged tensors are [N, H, ...] with the token first.
  auto strides = [&](const Tensor& t, int64_t* s) {
    if (ragged) {
      s[0] = 0, s[1] = t.stride(1), s[2] = t.stride(0);
    } else {
      s[0] = t.stride(0), s[1] = t.stride(1), s[2] = t.stride(2);
    }
  };
  strides(q, pb.qs);
  strides(out, pb.os);
  if (lse.defined()) strides(lse, pb.ls);
  const int64_t hkv = kv.num_kv_heads(), group = q.size(1) / hkv;
  run_prefill<T>(pb, ws.host_work(), ws.host_ints[0], hkv, group, kv.head_dim(), params,
                 params.causal && !mask.defined());
  (void)plan;
}

}  // namespace

void batch_prefill_paged(const Workspace::Impl& ws, const Plan& plan, const Tensor& q,
                         const Tensor& qo_indptr, const PagedKv& kv, const Tensor& mask,
                         const AttentionParams& params, Tensor& out, const Tensor& lse) {
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    prefill_paged_typed<T>(ws, plan, q, qo_indptr, kv, mask, params, out, lse);
  });
}

}  // namespace flashpage::cpu
