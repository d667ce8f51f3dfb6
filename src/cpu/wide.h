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
template <int G, class T, class Prefetch>
inline void logits(const float* const* q, const T* const* kp, int a, int b, int64_t d,
                   float* s, int stride, const Prefetch& pf) {
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
template <int G, class T, class Prefetch>
inline void logits(const float* const*, const T* const*, int, int, int64_t, float*, int,
                   const Prefetch&) {}
template <int G, class T>
inline void values(const float*, int, const T* const*, int, int, int64_t, float* const*) {}

#endif

}  // namespace flashpage::cpu::wide
