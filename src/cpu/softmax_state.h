#pragma once
// The online (streaming) softmax state of one query row: running max, running sum of
// e^(s - max) and an f32 accumulator of the weighted values. Decode, prefill, sdpa, the
// decode split merge and merge_states all go through it, so their numerics cannot drift.
//
// A finished (out, lse) pair is the state {max = lse, sum = 1, acc = out}; merging uses that.
// An empty state (max = -inf, sum = 0) finalises to zeros and LSE -inf, never NaN.
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/simd.h"

namespace flashpage::cpu {

class SoftmaxState {
 public:
  // acc: d floats (d a multiple of 8 unless only merge_* and finalize_* are used), owned by
  // the caller so states of one task can share contiguous scratch.
  void init(float* acc, int64_t d) {
    acc_ = acc;
    d_ = d;
    max_ = -std::numeric_limits<float>::infinity();
    sum_ = 0.0f;
    for (int64_t i = 0; i < d; ++i) acc_[i] = 0.0f;
  }

  // Turns a block of logits s[0..n) (-inf = key not seen; n <= 8 * kMaxVec) into the weights
  // the caller must add as acc += sum_j w_j * v_j. Rescales acc when the max grows.
  // Returns false when the block holds no visible key (all weights 0).
  bool update(float* s, int n) {
    float block_max = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < n; ++j) block_max = s[j] > block_max ? s[j] : block_max;
    if (block_max == -std::numeric_limits<float>::infinity()) {
      for (int j = 0; j < n; ++j) s[j] = 0.0f;
      return false;
    }
    if (block_max > max_) {
      rescale(std::exp(max_ - block_max));  // max_ = -inf: factor 0 on a zero acc
      max_ = block_max;
    }
    const int n8 = n & ~7;
    V8f total = splat(0.0f);
    for (int j = 0; j < n8; j += 8) {
      const V8f w = exp8(load8(s + j) - splat(max_));
      store8(s + j, w);
      total += w;
    }
    float tail = 0.0f;
    for (int j = n8; j < n; ++j) {
      s[j] = s[j] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(s[j] - max_);
      tail += s[j];
    }
    sum_ += hsum(total) + tail;
    return true;
  }

  // Adds a finished partial result: o (d floats, normalised) with its log-sum-exp.
  void merge_normalized(const float* o, float lse) {
    if (lse == -std::numeric_limits<float>::infinity()) return;  // no keys: nothing to add
    const float m = lse > max_ ? lse : max_;
    const float a = std::exp(max_ - m), b = std::exp(lse - m);
    for (int64_t i = 0; i < d_; ++i) acc_[i] = acc_[i] * a + o[i] * b;
    sum_ = sum_ * a + b;
    max_ = m;
  }

  void merge(const SoftmaxState& other) {
    if (other.sum_ == 0.0f) return;
    const float m = other.max_ > max_ ? other.max_ : max_;
    const float a = std::exp(max_ - m), b = std::exp(other.max_ - m);
    for (int64_t i = 0; i < d_; ++i) acc_[i] = acc_[i] * a + other.acc_[i] * b;
    sum_ = sum_ * a + other.sum_ * b;
    max_ = m;
  }

  bool empty() const { return !(sum_ > 0.0f); }
  float lse() const {
    return empty() ? -std::numeric_limits<float>::infinity() : max_ + std::log(sum_);
  }
  // out[i * stride] = acc / sum (zeros when empty).
  template <class T>
  void finalize(T* out, int64_t stride = 1) const {
    const float inv = empty() ? 0.0f : 1.0f / sum_;
    for (int64_t i = 0; i < d_; ++i) out[i * stride] = from_f32<T>(acc_[i] * inv);
  }

  float* acc() const { return acc_; }

 private:
  void rescale(float factor) {
    sum_ *= factor;
    for (int64_t i = 0; i < d_; i += 8) store8(acc_ + i, load8(acc_ + i) * splat(factor));
  }

  float* acc_ = nullptr;
  int64_t d_ = 0;
  float max_ = -std::numeric_limits<float>::infinity();
  float sum_ = 0.0f;
};

}  // namespace flashpage::cpu
