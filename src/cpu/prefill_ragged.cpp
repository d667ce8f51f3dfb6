// Ragged prefill on the CPU: contiguous segments, q [Nq, Hq, D] against k/v [Nkv, Hkv, D];
// causal is bottom-right within each segment pair.
#include "cpu/cpu_ops.h"
#include "cpu/dispatch.h"
#include "cpu/paged_view.h"
#include "cpu/prefill_driver.h"

namespace flashpage::cpu {

namespace {

template <class T>
struct RaggedProblem {
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const T* qp;
  const T* kp;
  const T* vp;
  T* o;
  float* l;
  int64_t q0, q1, k0, k1, v0, v1, o0, o1, l0, l1;  // strides of (token, head)

  RowShape shape(int64_t b) const {
    RowShape s;
    s.q_len = qo_indptr[b + 1] - qo_indptr[b];
    s.kv_len = kv_indptr[b + 1] - kv_indptr[b];
    s.offset = s.kv_len - s.q_len;
    return s;
  }
  StridedKv<T> kv(int64_t b) const {
    return StridedKv<T>(kp + kv_indptr[b] * k0, vp + kv_indptr[b] * v0, k0, v0, k1, v1);
  }
  const T* q(int64_t b, int64_t i, int64_t head) const {
    return qp + (qo_indptr[b] + i) * q0 + head * q1;
  }
  T* out(int64_t b, int64_t i, int64_t head) const {
    return o + (qo_indptr[b] + i) * o0 + head * o1;
  }
  float* lse(int64_t b, int64_t i, int64_t head) const {
    return l ? l + (qo_indptr[b] + i) * l0 + head * l1 : nullptr;
  }
  MaskRow mask(int64_t, int64_t, int64_t) const { return {}; }
};

template <class T>
void ragged_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qo_indptr,
                  const Tensor& kv_indptr, const AttentionParams& params, Tensor& out,
                  const Tensor& lse) {
  const int32_t* qo = qo_indptr.data_as<int32_t>();
  const int32_t* kvp = kv_indptr.defined() ? kv_indptr.data_as<int32_t>() : qo;
  const bool has_lse = lse.defined();
  RaggedProblem<T> pb{qo, kvp,
                      static_cast<const T*>(q.data()), static_cast<const T*>(k.data()),
                      static_cast<const T*>(v.data()), static_cast<T*>(out.data()),
                      has_lse ? lse.data_as<float>() : nullptr,
                      q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
                      v.stride(1), out.stride(0), out.stride(1),
                      has_lse ? lse.stride(0) : 0, has_lse ? lse.stride(1) : 0};
  const int64_t batch = qo_indptr.numel() - 1;
  std::vector<int64_t> q_lens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) q_lens[size_t(b)] = qo[b + 1] - qo[b];
  const std::vector<WorkItem> items = query_tiles(q_lens, 16);
  const int64_t hkv = k.size(1);
  run_prefill<T>(pb, items.data(), int64_t(items.size()), hkv, q.size(1) / hkv, q.size(2),
                 params, params.causal);
}

}  // namespace

void batch_prefill_ragged(const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& qo_indptr, const Tensor& kv_indptr,
                          const AttentionParams& params, Tensor& out, const Tensor& lse) {
  dispatch_float(q.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ragged_typed<T>(q, k, v, qo_indptr, kv_indptr, params, out, lse);
  });
}

}  // namespace flashpage::cpu
