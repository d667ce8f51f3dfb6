#include <algorithm>
#include <string>

#include "core/check.h"
#include "flashpage/dtype.h"

namespace flashpage {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "float16" || s == "half" || s == "fp16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f8e4m3" || s == "fp8_e4m3" || s == "float8_e4m3fn") return DType::f8e4m3;
  if (s == "f8e5m2" || s == "fp8_e5m2" || s == "float8_e5m2") return DType::f8e5m2;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "bool" || s == "boolean") return DType::boolean;
  check::fail("dtype: expected f32|f16|bf16|f8e4m3|f8e5m2|i32|i64|bool, got '", text, "'");
}

double load_as_double(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::f8e4m3: return f8e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::f8e5m2: return f8e5m2_to_f32(static_cast<const uint8_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i64: return double(static_cast<const int64_t*>(base)[i]);
    case DType::boolean: return static_cast<const uint8_t*>(base)[i] ? 1.0 : 0.0;
  }
  return 0.0;
}

void store_from_double(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = float(v); break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = f32_to_f16(float(v)); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(float(v)); break;
    case DType::f8e4m3: static_cast<uint8_t*>(base)[i] = f32_to_f8e4m3(float(v)); break;
    case DType::f8e5m2: static_cast<uint8_t*>(base)[i] = f32_to_f8e5m2(float(v)); break;
    case DType::i32: static_cast<int32_t*>(base)[i] = int32_t(v); break;
    case DType::i64: static_cast<int64_t*>(base)[i] = int64_t(v); break;
    case DType::boolean: static_cast<uint8_t*>(base)[i] = v != 0.0; break;
  }
}

}  // namespace flashpage
