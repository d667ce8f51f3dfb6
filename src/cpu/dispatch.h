#pragma once
// Calls fn(Tag<T>{}) with T the storage type of a floating dtype (float, F16, Bf16).
#include "cpu/simd.h"
#include "flashpage/error.h"

namespace flashpage::cpu {

template <class T>
struct Tag {
  using type = T;
};

template <class Fn>
void dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: fn(Tag<float>{}); return;
    case DType::f16: fn(Tag<F16>{}); return;
    case DType::bf16: fn(Tag<Bf16>{}); return;
    default: throw Error("cpu: unsupported dtype (validation should have rejected it)");
  }
}

}  // namespace flashpage::cpu
