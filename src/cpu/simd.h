#pragma once
// Eight-float vectors (GCC/Clang vector extensions) with loads that convert f32/f16/bf16 in
// registers. 8 lanes because every head_dim is a multiple of 8; on AVX-512 machines the
// compiler still issues one instruction per vector, and double-pumped cores lose nothing.
// The intrinsics are guarded so a portable build (FLASHPAGE_CPU_ARCH="") falls back to
// scalar loops with the same results.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "flashpage/dtype.h"

#if defined(__AVX2__) || defined(__F16C__) || defined(__FMA__)
#include <immintrin.h>
#endif

// The vector types never cross a non-inlined ABI boundary; a portable build (no AVX) would
// otherwise warn that returning them by value has a different ABI.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace flashpage::cpu {

// Storage types of the 16-bit formats; distinct so templates can tell them apart.
struct Bf16 { uint16_t bits; };
struct F16 { uint16_t bits; };

typedef float V8f __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));

inline float to_f32(float x) { return x; }
inline float to_f32(Bf16 x) { return bf16_to_f32(x.bits); }
inline float to_f32(F16 x) { return f16_to_f32(x.bits); }

template <class T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) { return x; }
template <>
inline Bf16 from_f32<Bf16>(float x) { return Bf16{f32_to_bf16(x)}; }
template <>
inline F16 from_f32<F16>(float x) { return F16{f32_to_f16(x)}; }

inline V8f splat(float x) { return V8f{x, x, x, x, x, x, x, x}; }

inline V8f load8(const float* p) {
  V8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline V8f load8(const Bf16* p) {
#ifdef __AVX2__
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return (V8f)_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
#else
  V8f v;
  for (int i = 0; i < 8; ++i) v[i] = bf16_to_f32(p[i].bits);
  return v;
#endif
}
inline V8f load8(const F16* p) {
#ifdef __F16C__
  return (V8f)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  V8f v;
  for (int i = 0; i < 8; ++i) v[i] = f16_to_f32(p[i].bits);
  return v;
#endif
}
inline void store8(float* p, V8f v) { std::memcpy(p, &v, sizeof v); }

// a * b + c in one rounding where the machine has FMA (ISO C++ mode disables contraction).
inline V8f fmadd(V8f a, V8f b, V8f c) {
#ifdef __FMA__
  return (V8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

inline float hsum(V8f v) {
#ifdef __AVX__
  __m128 lo = _mm256_castps256_ps128((__m256)v);
  const __m128 hi = _mm256_extractf128_ps((__m256)v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
#else
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
#endif
}

// e^x for x <= 0 (softmax weights), ~1 ulp: Cody-Waite reduction by ln 2 and the Cephes
// polynomial. Inputs below -87.3 (including -inf) give exactly 0.
inline V8f exp8(V8f x) {
  const V8f kLog2e = splat(1.44269504088896341f), kShift = splat(12582912.0f);  // 1.5 * 2^23
  const V8i too_small = x < splat(-87.3f);
  x = x < splat(-87.3f) ? splat(-87.3f) : x;
  const V8f t = fmadd(x, kLog2e, kShift);  // round(x * log2 e) in the low mantissa bits
  const V8f n = t - kShift;
  V8f r = fmadd(n, splat(-0.693359375f), x);
  r = fmadd(n, splat(2.12194440e-4f), r);
  V8f p = splat(1.9875691500e-4f);
  p = fmadd(p, r, splat(1.3981999507e-3f));
  p = fmadd(p, r, splat(8.3334519073e-3f));
  p = fmadd(p, r, splat(4.1665795894e-2f));
  p = fmadd(p, r, splat(1.6666665459e-1f));
  p = fmadd(p, r, splat(5.0000001201e-1f));
  p = fmadd(p, r * r, r + splat(1.0f));
  const V8i bits = ((V8i)t - (V8i)kShift + V8i{127, 127, 127, 127, 127, 127, 127, 127}) << 23;
  const V8f result = p * (V8f)bits;
  return (V8f)((V8i)result & ~too_small);
}

// Converts n values (n a multiple of 8) to f32, multiplied by `scale`.
template <class T>
inline void load_row_f32(const T* src, int64_t n, float scale, float* dst) {
  for (int64_t c = 0; c < n; c += 8) store8(dst + c, load8(src + c) * splat(scale));
}
// Any n, any element stride (for rows that are not 8-aligned in length, e.g. merge_states).
template <class T>
inline void load_strided_f32(const T* src, int64_t n, int64_t stride, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i * stride]);
}
template <class T>
inline void store_strided(const float* src, int64_t n, int64_t stride, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i * stride] = from_f32<T>(src[i]);
}

}  // namespace flashpage::cpu
