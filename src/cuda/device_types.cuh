#pragma once
// Device element types for flashpage dtypes, and float conversions usable in templates.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "flashpage/dtype.h"

namespace flashpage::cuda {

template <DType kType>
struct DeviceTypeOf;
template <>
struct DeviceTypeOf<DType::f32> { using type = float; };
template <>
struct DeviceTypeOf<DType::f16> { using type = __half; };
template <>
struct DeviceTypeOf<DType::bf16> { using type = __nv_bfloat16; };

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Loads element i of a float tensor whose dtype is only known at run time (f32/f16/bf16);
// used by the small generic kernels where one instantiation for all dtypes is enough.
__device__ __forceinline__ float load_as_float(const void* base, DType type, int64_t i) {
  switch (type) {
    case DType::f16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}
__device__ __forceinline__ void store_from_float(void* base, DType type, int64_t i, float x) {
  switch (type) {
    case DType::f16: static_cast<__half*>(base)[i] = __float2half_rn(x); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x); break;
    default: static_cast<float*>(base)[i] = x; break;
  }
}

}  // namespace flashpage::cuda
