#pragma once
// Element types and their host conversions (round to nearest even; fp8 saturates to its
// largest finite value, as the OCP fp8 "satfinite" conversions do).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace flashpage {

enum class DType : uint8_t { f32, f16, bf16, f8e4m3, f8e5m2, i32, i64, boolean };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i64: return 8;
    default: return 1;
  }
}
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8e4m3 ||
         t == DType::f8e5m2;
}
std::string_view dtype_name(DType t);
// Accepts the names dtype_name gives and the usual aliases (float32, half, bfloat16, ...).
DType parse_dtype(std::string_view text);

// ---- host conversions -------------------------------------------------------------------
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                         // nearest even
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float mag = std::ldexp(float(man), -24);
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}
inline uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);         // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);        // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                        // below 2^-14: subnormal
    const float mag = std::bit_cast<float>(a);
    // mag / 2^-24 rounded to nearest even (the float is exact; nearbyint rounds to even).
    return uint16_t(sign | uint16_t(std::nearbyint(mag * 16777216.0f)));
  }
  uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | uint16_t(r >> 13));
}

namespace detail {
// Generic fp8 encoder: exp_bits/man_bits, bias, largest finite magnitude, saturating.
inline uint8_t f32_to_fp8(float f, int man_bits, int bias, float max_finite) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return uint8_t(sign | 0x7f);  // e4m3: the NaN code; e5m2: a NaN
  float a = std::fabs(f);
  if (a >= max_finite) a = max_finite;  // saturate (inf included)
  const int min_normal_exp = 1 - bias;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;     // a = 1.x * 2^exp
  if (a == 0.0f) return sign;
  if (exp < min_normal_exp) exp = min_normal_exp;  // subnormal spacing
  const float quantum = std::ldexp(1.0f, exp - man_bits);
  float q = std::nearbyint(a / quantum) * quantum;  // round to nearest even
  if (q > max_finite) q = max_finite;
  // encode q
  if (q == 0.0f) return sign;
  std::frexp(q, &e);
  exp = e - 1;
  uint32_t field_exp, field_man;
  if (exp < min_normal_exp) {
    field_exp = 0;
    field_man = uint32_t(std::nearbyint(q / std::ldexp(1.0f, min_normal_exp - man_bits)));
  } else {
    field_exp = uint32_t(exp + bias);
    field_man = uint32_t(std::nearbyint((q / std::ldexp(1.0f, exp) - 1.0f) * float(1 << man_bits)));
  }
  return uint8_t(sign | (field_exp << man_bits) | field_man);
}
inline float fp8_to_f32(uint8_t v, int man_bits, int bias) {
  const bool neg = v & 0x80;
  const int exp_bits = 7 - man_bits;
  const int field_exp = (v >> man_bits) & ((1 << exp_bits) - 1);
  const int field_man = v & ((1 << man_bits) - 1);
  float mag;
  if (field_exp == 0)
    mag = std::ldexp(float(field_man), 1 - bias - man_bits);
  else
    mag = std::ldexp(1.0f + float(field_man) / float(1 << man_bits), field_exp - bias);
  return neg ? -mag : mag;
}
}  // namespace detail

// e4m3 (OCP "fn"): bias 7, no infinities, 0x7f/0xff are NaN, max 448.
inline float f8e4m3_to_f32(uint8_t v) {
  if ((v & 0x7f) == 0x7f) return std::nanf("");
  return detail::fp8_to_f32(v, 3, 7);
}
inline uint8_t f32_to_f8e4m3(float f) { return detail::f32_to_fp8(f, 3, 7, 448.0f); }
// e5m2: bias 15, IEEE-like infinities and NaN, max finite 57344.
inline float f8e5m2_to_f32(uint8_t v) {
  if ((v & 0x7c) == 0x7c) {
    if (v & 0x03) return std::nanf("");
    return (v & 0x80) ? -INFINITY : INFINITY;
  }
  return detail::fp8_to_f32(v, 2, 15);
}
inline uint8_t f32_to_f8e5m2(float f) {
  if (std::isnan(f)) return uint8_t(0x7f);
  return detail::f32_to_fp8(f, 2, 15, 57344.0f);
}

// Reads element i of a buffer of type t as double / writes a double into it.
double load_as_double(const void* base, DType t, int64_t i);
void store_from_double(void* base, DType t, int64_t i, double v);

}  // namespace flashpage
