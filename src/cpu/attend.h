#pragma once
// The attention kernel every CPU op runs: a set of query rows (pre-scaled f32 vectors, each
// with its own visible key range and mask row) against the keys [begin, end) of one KV
// head of one source. Keys go in blocks of kBlock: logits for the block, one softmax update
// per row, then the weighted V rows. Query rows go in groups of up to 4 that share every
// K/V vector load (GQA heads of one KV head, or the tokens of a prefill tile).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/mask_view.h"
#include "cpu/simd.h"
#include "cpu/softmax_state.h"

namespace flashpage::cpu {

constexpr int kBlock = 32;      // keys per softmax update
constexpr int kMaxRows = 64;    // query rows per kernel call (bounds the scratch)

struct QueryRow {
  const float* q;   // [D], multiplied by the scale
  int64_t lo, hi;   // visible keys [lo, hi); empty when lo >= hi
  MaskRow mask;
};

// What a task needs besides its rows: scratch of kMaxRows * kBlock logits.
struct AttendScratch {
  float logits[kMaxRows * kBlock];
};

namespace detail {

// Logits of G rows for tokens [a, b) of the block, written to s[r * kBlock + t].
template <int G, class T>
inline void block_logits(const float* const* q, const T* const* kp, int a, int b, int64_t d,
                         float* s) {
  int t = a;
  for (; t + 1 < b; t += 2) {  // two tokens at a time: 2G independent FMA chains
    const T* k0 = kp[t];
    const T* k1 = kp[t + 1];
    V8f x[G], y[G];
    for (int r = 0; r < G; ++r) x[r] = y[r] = splat(0.0f);
    for (int64_t c = 0; c < d; c += 8) {
      const V8f kc0 = load8(k0 + c), kc1 = load8(k1 + c);
      for (int r = 0; r < G; ++r) {
        const V8f qc = load8(q[r] + c);
        x[r] = fmadd(qc, kc0, x[r]);
        y[r] = fmadd(qc, kc1, y[r]);
      }
    }
    for (int r = 0; r < G; ++r) {
      s[r * kBlock + t] = hsum(x[r]);
      s[r * kBlock + t + 1] = hsum(y[r]);
    }
  }
  if (t < b) {
    const T* k0 = kp[t];
    V8f x[G];
    for (int r = 0; r < G; ++r) x[r] = splat(0.0f);
    for (int64_t c = 0; c < d; c += 8) {
      const V8f kc0 = load8(k0 + c);
      for (int r = 0; r < G; ++r) x[r] = fmadd(load8(q[r] + c), kc0, x[r]);
    }
    for (int r = 0; r < G; ++r) s[r * kBlock + t] = hsum(x[r]);
  }
}

// acc[r] += sum_t w[r][t] * v[t] over tokens [a, b).
template <int G, class T>
inline void block_values(const float* w, const T* const* vp, int a, int b, int64_t d,
                         float* const* acc) {
  for (int64_t c = 0; c < d; c += 8) {
    V8f o[G];
    for (int r = 0; r < G; ++r) o[r] = load8(acc[r] + c);
    for (int t = a; t < b; ++t) {
      const V8f vc = load8(vp[t] + c);
      for (int r = 0; r < G; ++r) o[r] = fmadd(splat(w[r * kBlock + t]), vc, o[r]);
    }
    for (int r = 0; r < G; ++r) store8(acc[r] + c, o[r]);
  }
}

template <int G, class T>
inline void block_group(const QueryRow* rows, SoftmaxState* states, const T* const* kp,
                        const T* const* vp, int64_t t0, int n, int64_t d, float soft_cap,
                        float* s) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Tokens of the block that any row of the group sees.
  int a = n, b = 0;
  for (int r = 0; r < G; ++r) {
    const int lo = int(std::clamp<int64_t>(rows[r].lo - t0, 0, n));
    const int hi = int(std::clamp<int64_t>(rows[r].hi - t0, 0, n));
    if (lo < hi) {
      a = std::min(a, lo);
      b = std::max(b, hi);
    }
  }
  if (a >= b) return;
  const float* q[G];
  for (int r = 0; r < G; ++r) q[r] = rows[r].q;
  block_logits<G>(q, kp, a, b, d, s);
  bool any = false;
  float* acc[G];
  for (int r = 0; r < G; ++r) {
    float* sr = s + r * kBlock;
    if (soft_cap > 0.0f) {
      const float inv = 1.0f / soft_cap;
      for (int t = a; t < b; ++t) sr[t] = soft_cap * std::tanh(sr[t] * inv);
    }
    rows[r].mask.apply(t0 + a, b - a, sr + a);
    const int lo = int(std::clamp<int64_t>(rows[r].lo - t0, a, b));
    const int hi = int(std::clamp<int64_t>(rows[r].hi - t0, lo, b));
    for (int t = a; t < lo; ++t) sr[t] = kNegInf;
    for (int t = hi; t < b; ++t) sr[t] = kNegInf;
    any |= states[r].update(sr + a, b - a);
    acc[r] = states[r].acc();
  }
  if (any) block_values<G>(s, vp, a, b, d, acc);
}

}  // namespace detail

// Runs rows[0..nrows) (nrows <= kMaxRows) over keys [begin, end) of head h of `kv` (a source
// with fill(t0, n, h, kp, vp)), updating states[0..nrows) (initialised by the caller).
template <class T, class Kv>
void attend(const Kv& kv, int64_t h, int64_t begin, int64_t end, const QueryRow* rows,
            int nrows, int64_t d, float soft_cap, SoftmaxState* states, AttendScratch& scratch) {
  // Only the keys that some row sees.
  int64_t lo = end, hi = begin;
  for (int r = 0; r < nrows; ++r) {
    if (rows[r].lo >= rows[r].hi) continue;
    lo = std::min(lo, rows[r].lo);
    hi = std::max(hi, rows[r].hi);
  }
  begin = std::max(begin, lo);
  end = std::min(end, hi);
  const T* kp[kBlock];
  const T* vp[kBlock];
  for (int64_t t0 = begin; t0 < end; t0 += kBlock) {
    const int n = int(std::min<int64_t>(kBlock, end - t0));
    kv.fill(t0, n, h, kp, vp);
    int r = 0;
    for (; r + 4 <= nrows; r += 4)
      detail::block_group<4>(rows + r, states + r, kp, vp, t0, n, d, soft_cap,
                             scratch.logits + r * kBlock);
    float* s = scratch.logits + r * kBlock;
    switch (nrows - r) {
      case 3: detail::block_group<3>(rows + r, states + r, kp, vp, t0, n, d, soft_cap, s); break;
      case 2: detail::block_group<2>(rows + r, states + r, kp, vp, t0, n, d, soft_cap, s); break;
      case 1: detail::block_group<1>(rows + r, states + r, kp, vp, t0, n, d, soft_cap, s); break;
      default: break;
    }
  }
}

}  // namespace flashpage::cpu
