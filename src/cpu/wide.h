#pragma once
// AVX-512 inner loops of attend() for head dims that are a multiple of 32 (16 for f32/f16).
// bf16 rows are split into even and odd elements, each already an f32 in a 32-bit lane
// (odd: mask the low half; even: shift left by 16), so a 32-value chunk costs two integer ops
// instead of four widen+shift ops. Queries and accumulators of such rows are kept in the
// same even/odd order (to_wide_order / from_wide_order), which the dot products and the
// weighted sums never need to undo.
#include <cstdint>
#include <type_traits>

#include "cpu/simd.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define FLASHPAGE_CPU_WIDE 1
#include <immintrin.h>
#endif
// With AVX512_BF16 the bf16 loops use the bf16 dot-product instruction (vdpbf16ps): one
// instruction does 32 multiply-adds of bf16 pairs into f32, so a token costs about half the
// instructions of the even/odd f32 path. Products of bf16 values are exact in f32; what
// changes numerically is that q (times the scale) and the softmax weights are rounded to bf16
// before the products, as the GPU kernels do for their tensor-core MMAs.
#if defined(FLASHPAGE_CPU_WIDE) && defined(__AVX512BF16__) && !defined(FLASHPAGE_CPU_NO_BF16_DOT)
#define FLASHPAGE_CPU_BF16_DOT 1
#endif

namespace flashpage::cpu::wide {

#ifdef FLASHPAGE_CPU_WIDE

// True when the wide loops handle rows of type T and length d.
template <class T>
inline bool usable(int64_t d) {
  return std::is_same_v<T, Bf16> ? d % 32 == 0 : d % 16 == 0;
}
template <class T>
constexpr bool kEvenOdd = std::is_same_v<T, Bf16>;

// Row layout used by the wide bf16 loops: per 32-value chunk, 16 even then 16 odd values.
inline void to_wide_order(float* row, int64_t d) {
  float tmp[32];
  for (int64_t c = 0; c < d; c += 32) {
    for (int j = 0; j < 16; ++j) {
      tmp[j] = row[c + 2 * j];
      tmp[16 + j] = row[c + 2 * j + 1];
    }
    for (int j = 0; j < 32; ++j) row[c + j] = tmp[j];
  }
}
inline void from_wide_order(float* row, int64_t d) {
  float tmp[32];
  for (int64_t c = 0; c < d; c += 32) {
    for (int j = 0; j < 16; ++j) {
      tmp[2 * j] = row[c + j];
      tmp[2 * j + 1] = row[c + 16 + j];
    }
    for (int j = 0; j < 32; ++j) row[c + j] = tmp[j];
  }
}

#ifdef FLASHPAGE_CPU_BF16_DOT
// values() accumulates bf16 rows through unpacklo/hi_epi16 of two tokens, so position p of a
// 32-value chunk holds dim 8*(p%16/4) + p%4 + 4*(p/16) (per 128-bit lane: 4 low dims, then
// the 4 high dims in the second half).
inline int acc_dim(int p) { return 8 * ((p % 16) / 4) + (p % 4) + 4 * (p / 16); }
inline void from_acc_order(float* row, int64_t d) {
  float tmp[32];
  for (int64_t c = 0; c < d; c += 32) {
    for (int p = 0; p < 32; ++p) tmp[acc_dim(p)] = row[c + p];
    for (int j = 0; j < 32; ++j) row[c + j] = tmp[j];
  }
}
#else
inline void from_acc_order(float* row, int64_t d) { from_wide_order(row, d); }
#endif

inline float hsum16(__m512 x) {
  const __m256 lo = _mm512_extractf32x8_ps(x, 0), hi = _mm512_extractf32x8_ps(x, 1);
  return hsum((V8f)_mm256_add_ps(lo, hi));
}

// 16 values as f32 (f32 / f16 rows).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const F16* p) {
  // The maskz forms avoid GCC 12's false -Wmaybe-uninitialized in the unmasked intrinsics.
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// 32 bf16 values as (even, odd) f32 vectors.
inline void load32(const Bf16* p, __m512& even, __m512& odd) {
  const __m512i x = _mm512_loadu_si512(p);
  even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xffff), x, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int32_t(0xffff0000u))));
}

// s[r * stride + t] = q[r] . k[t] for tokens [a, b).
#ifdef FLASHPAGE_CPU_BF16_DOT
// q (even/odd f32 order) as bf16 pairs (q[2i], q[2i+1]) per 32-bit lane, matching k's layout.
inline __m512i q_pairs(const float* q) {
  const __m512i e = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(q)));
  const __m512i o = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(q + 16)));
  return _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
}
inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

template <int G, class Prefetch>
inline void logits_bf16_dot(const float* const* q, const Bf16* const* kp, int a, int b,
                            int64_t d, float* s, int stride, const Prefetch& pf) {
  constexpr int kMaxChunks = 256 / 32;
  __m512i qp[G][kMaxChunks];
  const int chunks = int(d / 32);
  for (int r = 0; r < G; ++r)
    for (int c = 0; c < chunks; ++c) qp[r][c] = q_pairs(q[r] + 32 * c);
  int t = a;
  for (; t + 1 < b; t += 2) {
    pf.token(t);
    pf.token(t + 1);
    __m512 x[G], y[G];
    for (int r = 0; r < G; ++r) x[r] = y[r] = _mm512_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
      const __m512i k0 = _mm512_loadu_si512(kp[t] + 32 * c);
      const __m512i k1 = _mm512_loadu_si512(kp[t + 1] + 32 * c);
      for (int r = 0; r < G; ++r) {
        x[r] = _mm512_dpbf16_ps(x[r], as_bh(qp[r][c]), as_bh(k0));
        y[r] = _mm512_dpbf16_ps(y[r], as_bh(qp[r][c]), as_bh(k1));
      }
    }
    for (int r = 0; r < G; ++r) {
      s[r * stride + t] = hsum16(x[r]);
      s[r * stride + t + 1] = hsum16(y[r]);
    }
  }
  if (t < b) {
    pf.token(t);
    __m512 x[G];
    for (int r = 0; r < G; ++r) x[r] = _mm512_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
      const __m512i k0 = _mm512_loadu_si512(kp[t] + 32 * c);
      for (int r = 0; r < G; ++r) x[r] = _mm512_dpbf16_ps(x[r], as_bh(qp[r][c]), as_bh(k0));
    }
    for (int r = 0; r < G; ++r) s[r * stride + t] = hsum16(x[r]);
  }
}

// acc[r] += sum_t w[r][t] * v[t]: tokens in pairs, (w_t, w_t+1) against (v_t, v_t+1)
// interleaved by unpacklo/hi_epi16 (accumulator order: acc_dim).
template <int G>
inline void values_bf16_dot(const float* w, int stride, const Bf16* const* vp, int a, int b,
                            int64_t d, float* const* acc) {
  constexpr int kPairs = 32 / 2;  // token pairs of a full block
  uint32_t wp[G][kPairs + 1];
  const int n = b - a, pairs = (n + 1) / 2;
  for (int r = 0; r < G; ++r)
    for (int i = 0; i < pairs; ++i) {
      const int t = a + 2 * i;
      const uint32_t lo = f32_to_bf16(w[r * stride + t]);
      const uint32_t hi = t + 1 < b ? f32_to_bf16(w[r * stride + t + 1]) : 0u;
      wp[r][i] = lo | (hi << 16);
    }
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t c = 0; c < d; c += 32) {
    __m512 lo_acc[G], hi_acc[G];
    for (int r = 0; r < G; ++r) {
      lo_acc[r] = _mm512_loadu_ps(acc[r] + c);
      hi_acc[r] = _mm512_loadu_ps(acc[r] + c + 16);
    }
    for (int i = 0; i < pairs; ++i) {
      const int t = a + 2 * i;
      const __m512i v0 = _mm512_loadu_si512(vp[t] + c);
      const __m512i v1 = t + 1 < b ? _mm512_loadu_si512(vp[t + 1] + c) : zero;
      const __m512i lo = _mm512_unpacklo_epi16(v0, v1), hi = _mm512_unpackhi_epi16(v0, v1);
      for (int r = 0; r < G; ++r) {
        const __m512i wt = _mm512_set1_epi32(int32_t(wp[r][i]));
        lo_acc[r] = _mm512_dpbf16_ps(lo_acc[r], as_bh(wt), as_bh(lo));
        hi_acc[r] = _mm512_dpbf16_ps(hi_acc[r], as_bh(wt), as_bh(hi));
      }
    }
    for (int r = 0; r < G; ++r) {
      _mm512_storeu_ps(acc[r] + c, lo_acc[r]);
      _mm512_storeu_ps(acc[r] + c + 16, hi_acc[r]);
    }
  }
}
#endif

template <int G, class T, class Prefetch>
inline void logits(const float* const* q, const T* const* kp, int a, int b, int64_t d,
                   float* s, int stride, const Prefetch& pf) {
#ifdef FLASHPAGE_CPU_BF16_DOT
  if constexpr (std::is_same_v<T, Bf16>) {
    logits_bf16_dot<G>(q, kp, a, b, d, s, stride, pf);
    return;
  }
#endif
  int t = a;
  for (; t + 1 < b; t += 2) {
    pf.token(t);
    pf.token(t + 1);
    __m512 x[G], y[G];
    for (int r = 0; r < G; ++r) x[r] = y[r] = _mm512_setzero_ps();
    if constexpr (kEvenOdd<T>) {
      for (int64_t c = 0; c < d; c += 32) {
        __m512 e0, o0, e1, o1;
        load32(kp[t] + c, e0, o0);
        load32(kp[t + 1] + c, e1, o1);
        for (int r = 0; r < G; ++r) {
          const __m512 qe = _mm512_loadu_ps(q[r] + c), qo = _mm512_loadu_ps(q[r] + c + 16);
          x[r] = _mm512_fmadd_ps(qe, e0, x[r]);
          y[r] = _mm512_fmadd_ps(qe, e1, y[r]);
          x[r] = _mm512_fmadd_ps(qo, o0, x[r]);
          y[r] = _mm512_fmadd_ps(qo, o1, y[r]);
        }
      }
    } else {
      for (int64_t c = 0; c < d; c += 16) {
        const __m512 k0 = load16(kp[t] + c), k1 = load16(kp[t + 1] + c);
        for (int r = 0; r < G; ++r) {
          const __m512 qc = _mm512_loadu_ps(q[r] + c);
          x[r] = _mm512_fmadd_ps(qc, k0, x[r]);
          y[r] = _mm512_fmadd_ps(qc, k1, y[r]);
        }
      }
    }
    for (int r = 0; r < G; ++r) {
      s[r * stride + t] = hsum16(x[r]);
      s[r * stride + t + 1] = hsum16(y[r]);
    }
  }
  if (t < b) {
    pf.token(t);
    __m512 x[G];
    for (int r = 0; r < G; ++r) x[r] = _mm512_setzero_ps();
    if constexpr (kEvenOdd<T>) {
      for (int64_t c = 0; c < d; c += 32) {
        __m512 e0, o0;
        load32(kp[t] + c, e0, o0);
        for (int r = 0; r < G; ++r) {
          x[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q[r] + c), e0, x[r]);
          x[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q[r] + c + 16), o0, x[r]);
        }
      }
    } else {
      for (int64_t c = 0; c < d; c += 16) {
        const __m512 k0 = load16(kp[t] + c);
        for (int r = 0; r < G; ++r) x[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q[r] + c), k0, x[r]);
      }
    }
    for (int r = 0; r < G; ++r) s[r * stride + t] = hsum16(x[r]);
  }
}

// acc[r] += sum_t w[r * stride + t] * v[t] over tokens [a, b).
template <int G, class T>
inline void values(const float* w, int stride, const T* const* vp, int a, int b, int64_t d,
                   float* const* acc) {
#ifdef FLASHPAGE_CPU_BF16_DOT
  if constexpr (std::is_same_v<T, Bf16>) {
    values_bf16_dot<G>(w, stride, vp, a, b, d, acc);
    return;
  }
#endif
  if constexpr (kEvenOdd<T>) {
    for (int64_t c = 0; c < d; c += 32) {
      __m512 oe[G], oo[G];
      for (int r = 0; r < G; ++r) {
        oe[r] = _mm512_loadu_ps(acc[r] + c);
        oo[r] = _mm512_loadu_ps(acc[r] + c + 16);
      }
      for (int t = a; t < b; ++t) {
        __m512 e, o;
        load32(vp[t] + c, e, o);
        for (int r = 0; r < G; ++r) {
          const __m512 wt = _mm512_set1_ps(w[r * stride + t]);
          oe[r] = _mm512_fmadd_ps(wt, e, oe[r]);
          oo[r] = _mm512_fmadd_ps(wt, o, oo[r]);
        }
      }
      for (int r = 0; r < G; ++r) {
        _mm512_storeu_ps(acc[r] + c, oe[r]);
        _mm512_storeu_ps(acc[r] + c + 16, oo[r]);
      }
    }
  } else {
    for (int64_t c = 0; c < d; c += 16) {
      __m512 o[G];
      for (int r = 0; r < G; ++r) o[r] = _mm512_loadu_ps(acc[r] + c);
      for (int t = a; t < b; ++t) {
        const __m512 v = load16(vp[t] + c);
        for (int r = 0; r < G; ++r) o[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[r * stride + t]), v, o[r]);
      }
      for (int r = 0; r < G; ++r) _mm512_storeu_ps(acc[r] + c, o[r]);
    }
  }
}

#else  // no AVX-512: attend() uses its 8-wide loops only

template <class T>
inline bool usable(int64_t) { return false; }
template <class T>
constexpr bool kEvenOdd = false;
inline void to_wide_order(float*, int64_t) {}
inline void from_wide_order(float*, int64_t) {}
inline void from_acc_order(float*, int64_t) {}
template <int G, class T, class Prefetch>
inline void logits(const float* const*, const T* const*, int, int, int64_t, float*, int,
                   const Prefetch&) {}
template <int G, class T>
inline void values(const float*, int, const T* const*, int, int, int64_t, float* const*) {}

#endif

}  // namespace flashpage::cpu::wide
