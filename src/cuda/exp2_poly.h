#pragma once
// 2^x on the FMA and integer pipes, without MUFU: x = k + f with k = round(x) and f in
// [-0.5, 0.5]; 2^f by a polynomial, 2^k by adding k to the result's exponent field.
//
// Why: MUFU computes 16 exponentials per clock per SM, the FMA pipe 128 multiply-adds. At
// head_dim 64 the exponentials of a 128-key S tile keep MUFU busy as long as the tile's two
// GEMMs keep the tensor cores, so the prefill can move a share of them here (FlashAttention-4
// does the same on Blackwell). Measured on an H100 (bench/NOTES.md, session 32): 13 per
// clock and SM alone, 1.3x MUFU's rate mixed 1:3 with it (bench/exp2_bench), but the prefill
// at head_dim 64 ran 1-7% slower with it, so only the poly* experiments use it.
//
// The coefficients are this file's own: minimax fits of the relative error on [-0.5, 0.5]
// with p(0) = 1 (so 2^0 is exact), by a Remez exchange in mpmath, rounded to f32:
//   degree 3: max relative error 4.3e-4 (below bf16's half ulp, 2^-9)
//   degree 4: max relative error 5.4e-6 (below f16's, 2^-11)
//
// Domain: x <= 64. -inf gives +0 and x below -126 a denormal or +0 (which every consumer
// here flushes or ignores), as ex2.approx.ftz gives +0.
//
// Host and device: the host build runs the same IEEE f32 operations (no contraction under
// -std=c++20; the two adds have no product nvcc could fuse them with), so
// tests/test_exp2_poly.cpp checks the error bounds on any machine.
#include <cmath>

#if defined(__CUDACC__)
#define FP_EXP2_POLY_HD __host__ __device__ __forceinline__
#else
#define FP_EXP2_POLY_HD inline
#endif

namespace flashpage::cuda {

template <int kDegree>
FP_EXP2_POLY_HD float exp2_poly(float x) {
  static_assert(kDegree == 3 || kDegree == 4, "exp2_poly: degree 3 or 4");
  // x + 1.5 * 2^23 has ulp 1: its low mantissa bits hold round(x) (ties to even), as
  // kRound's bits + k.
  constexpr float kRound = 12582912.0f;
  // -inf -> -127: round(x) = -127 and f = 0, so p = 1 and the bits below come out 0 exactly.
  x = fmaxf(x, -127.0f);
  const float t = x + kRound;
  const float f = x - (t - kRound);
  float p;
  if constexpr (kDegree == 3) {
    p = fmaf(fmaf(fmaf(0.0416987501f, f, 0.242030516f), f, 0.695766807f), f, 1.0f);
  } else {
    p = fmaf(
        fmaf(fmaf(fmaf(0.00967603736f, f, 0.0560057871f), f, 0.240221679f), f, 0.69310534f),
        f, 1.0f);
  }
  // p is in [0.70, 1.42] (exponent field 126 or 127). t's bits shifted left by 23 are k << 23
  // (kRound's own bits vanish: their low 9 bits are zero), so the sum scales p by 2^k. The
  // clamp keeps k >= -127, and k = -127 only with f >= 0 (p >= 1, field 127): the field never
  // goes below 0, and the smallest results are denormals or +0.
  return __builtin_bit_cast(float, __builtin_bit_cast(unsigned, p) +
                                       (__builtin_bit_cast(unsigned, t) << 23));
}

}  // namespace flashpage::cuda
