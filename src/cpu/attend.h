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
#include "cpu/wide.h"

namespace flashpage::cpu {

constexpr int kBlock = 32;      // keys per softmax update
constexpr int kMaxRows = 64;    // query rows per kernel call (bounds the scratch)
constexpr int kMaxHeads = 16;   // KV heads per kernel call

struct QueryRow {
  const float* q;   // [D], multiplied by the scale
  int64_t lo, hi;   // visible keys [lo, hi); empty when lo >= hi
  MaskRow mask;
};

// What a task needs besides its rows: scratch of kMaxRows * kBlock logits.
struct AttendScratch {
  float logits[kMaxRows * kBlock];
};

// The next block's rows of one head, prefetched a token at a time from inside the logits
// loop, so the requests overlap the arithmetic instead of arriving in one burst.
template <class T>
struct Prefetch {
  const T* const* k = nullptr;
  const T* const* v = nullptr;
  int n = 0;
  int64_t bytes = 0;
  void token(int t) const {
    if (t >= n) return;
    const char* kr = reinterpret_cast<const char*>(k[t]);
    const char* vr = reinterpret_cast<const char*>(v[t]);
    for (int64_t o = 0; o < bytes; o += 64) {
      __builtin_prefetch(kr + o, 0, 2);
      __builtin_prefetch(vr + o, 0, 2);
    }
  }
  // Whatever the loop over [a, b) did not reach.
  void rest(int a, int b) const {
    for (int t = 0; t < a; ++t) token(t);
    for (int t = b; t < n; ++t) token(t);
  }
};

namespace detail {

// Logits of G rows for tokens [a, b) of the block, written to s[r * kBlock + t].
template <int G, class T>
inline void block_logits(const float* const* q, const T* const* kp, int a, int b, int64_t d,
                         float* s, const Prefetch<T>& pf) {
  int t = a;
  for (; t + 1 < b; t += 2) {  // two tokens at a time: 2G independent FMA chains
    pf.token(t);
    pf.token(t + 1);
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
    pf.token(t);
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
                        float* s, const Prefetch<T>& pf) {
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
  if (a >= b) {
    pf.rest(0, 0);
    return;
  }
  const float* q[G];
  for (int r = 0; r < G; ++r) q[r] = rows[r].q;
  const bool use_wide = wide::usable<T>(d);
  if (use_wide)
    wide::logits<G>(q, kp, a, b, d, s, kBlock, pf);
  else
    block_logits<G>(q, kp, a, b, d, s, pf);
  pf.rest(a, b);
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
  if (!any) return;
  if (use_wide)
    wide::values<G>(s, kBlock, vp, a, b, d, acc);
  else
    block_values<G>(s, vp, a, b, d, acc);
}

}  // namespace detail

// A query row as attend() reads it: f32, times the scale, in the kernel's element order.
template <class T>
inline void load_query(const T* src, int64_t d, float scale, float* dst) {
  load_row_f32(src, d, scale, dst);
  if (wide::kEvenOdd<T> && wide::usable<T>(d)) wide::to_wide_order(dst, d);
}
// Puts a state's accumulator back in natural order; call once before finalize.
template <class T>
inline void restore_order(const SoftmaxState& state, int64_t d) {
  if (wide::kEvenOdd<T> && wide::usable<T>(d)) wide::from_acc_order(state.acc(), d);
}

// Runs query rows over keys [begin, end) of KV heads h0 .. h0+heads-1 of `kv` (a source with
// fill(t0, n, h, kp, vp)). Rows are head-major: rows [k * per_head, (k+1) * per_head) read
// head h0 + k; heads * per_head <= kMaxRows, heads <= kMaxHeads. states (one per row) are
// initialised by the caller. Several heads per call let a thread stream whole token rows
// (NHD) or whole pages (HND) instead of a 1/Hkv slice of them.
template <class T, class Kv>
void attend(const Kv& kv, int64_t h0, int heads, int64_t begin, int64_t end,
            const QueryRow* rows, int per_head, int64_t d, float soft_cap, SoftmaxState* states,
            AttendScratch& scratch) {
  const int nrows = heads * per_head;
  // Only the keys that some row sees.
  int64_t lo = end, hi = begin;
  for (int r = 0; r < nrows; ++r) {
    if (rows[r].lo >= rows[r].hi) continue;
    lo = std::min(lo, rows[r].lo);
    hi = std::max(hi, rows[r].hi);
  }
  begin = std::max(begin, lo);
  end = std::min(end, hi);
  // Addresses of this block and the next; the next block's rows are prefetched while this
  // one computes (the hardware prefetcher does not follow rows across shuffled pages).
  const T* kbuf[2][kMaxHeads][kBlock];
  const T* vbuf[2][kMaxHeads][kBlock];
  int cur = 0;
  if (begin < end)
    for (int k = 0; k < heads; ++k)
      kv.fill(begin, int(std::min<int64_t>(kBlock, end - begin)), h0 + k, kbuf[0][k], vbuf[0][k]);
  for (int64_t t0 = begin; t0 < end; t0 += kBlock) {
    const int n = int(std::min<int64_t>(kBlock, end - t0));
    const int n1 = int(std::clamp<int64_t>(end - t0 - kBlock, 0, kBlock));
    for (int k = 0; k < heads; ++k) {
      Prefetch<T> pf;  // head k of the next block, issued by this head's first row group
      if (n1 > 0) {
        kv.fill(t0 + kBlock, n1, h0 + k, kbuf[cur ^ 1][k], vbuf[cur ^ 1][k]);
        // Only a lone head's rows need it: they are short runs at a stride the hardware
        // prefetcher loses across pages. Several heads per task read whole token rows
        // (NHD) or page runs (HND), which it follows better than extra instructions do.
        if (heads == 1)
          pf = Prefetch<T>{kbuf[cur ^ 1][k], vbuf[cur ^ 1][k], n1, d * int64_t(sizeof(T))};
      }
      const Prefetch<T> none;
      const T* const* kp = kbuf[cur][k];
      const T* const* vp = vbuf[cur][k];
      const QueryRow* hr = rows + k * per_head;
      SoftmaxState* hs = states + k * per_head;
      int r = 0;
      for (; r + 4 <= per_head; r += 4)
        detail::block_group<4>(hr + r, hs + r, kp, vp, t0, n, d, soft_cap,
                               scratch.logits + r * kBlock, r == 0 ? pf : none);
      float* s = scratch.logits + r * kBlock;
      const Prefetch<T>& tail_pf = r == 0 ? pf : none;
      switch (per_head - r) {
        case 3: detail::block_group<3>(hr + r, hs + r, kp, vp, t0, n, d, soft_cap, s, tail_pf); break;
        case 2: detail::block_group<2>(hr + r, hs + r, kp, vp, t0, n, d, soft_cap, s, tail_pf); break;
        case 1: detail::block_group<1>(hr + r, hs + r, kp, vp, t0, n, d, soft_cap, s, tail_pf); break;
        default: break;
      }
    }
    cur ^= 1;
  }
}

}  // namespace flashpage::cpu
