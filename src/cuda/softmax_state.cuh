#pragma once
// The online-softmax algebra shared by every CUDA kernel (decode, split merge, merge_states,
// the generic prefill). Logits are kept in the log2 domain (already multiplied by log2(e)) so
// the hot loops use exp2f. A state with no keys has m = -inf and d = 0; merging or rescaling
// such states never produces NaN (exp2f(-inf - -inf) is guarded).
#include <cmath>

namespace flashpage::cuda {

constexpr float kLog2e = 1.4426950408889634f;  // natural logits -> log2 domain
constexpr float kLn2 = 0.6931471805599453f;    // log2-domain LSE -> natural log
constexpr float kNegInf = -INFINITY;

// Factor that moves values accumulated under max m_old to max m_new (m_new >= m_old).
// An empty state (m_old == -inf) contributes nothing.
__host__ __device__ __forceinline__ float softmax_rescale(float m_old, float m_new) {
  return m_old == kNegInf ? 0.0f : exp2f(m_old - m_new);
}
// The max to subtract before exp2f: -inf (all masked) would give exp2f(-inf + inf) = NaN.
__host__ __device__ __forceinline__ float softmax_safe_max(float m) {
  return m == kNegInf ? 0.0f : m;
}
// Natural-log LSE of a state, -inf for an empty one.
__host__ __device__ __forceinline__ float softmax_lse(float m, float d) {
  return d > 0.0f ? (m + log2f(d)) * kLn2 : kNegInf;
}

// Running softmax of one query row over N output values: max m (log2 domain), denominator d,
// unnormalised accumulator o.
template <int N>
struct SoftmaxState {
  float m, d, o[N];

  __device__ __forceinline__ void init() {
    m = kNegInf;
    d = 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = 0.0f;
  }
  // A normalised partial result with its natural-log LSE (the split-KV / merge_states form).
  __device__ __forceinline__ void set_normalized(const float (&out)[N], float lse) {
    const bool empty = lse == kNegInf;
    m = empty ? kNegInf : lse * kLog2e;
    d = empty ? 0.0f : 1.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = empty ? 0.0f : out[i];
  }
  // Folds in another state over a disjoint key set.
  __device__ __forceinline__ void merge(float m2, float d2, const float (&o2)[N]) {
    const float m_new = fmaxf(m, m2);
    if (m_new == kNegInf) return;  // both empty
    const float a = softmax_rescale(m, m_new), b = softmax_rescale(m2, m_new);
    d = d * a + d2 * b;
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = o[i] * a + o2[i] * b;
    m = m_new;
  }
  __device__ __forceinline__ void merge(const SoftmaxState& other) { merge(other.m, other.d, other.o); }
  // Output value i: o / d, zero for a row that saw no key.
  __device__ __forceinline__ float normalized(int i) const { return d > 0.0f ? o[i] / d : 0.0f; }
  __device__ __forceinline__ float lse() const { return softmax_lse(m, d); }
};

}  // namespace flashpage::cuda
