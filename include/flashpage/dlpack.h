#pragma once
// DLPack interop: tensors exchanged with PyTorch, JAX, CuPy or NumPy without a copy, through
// DLPack's DLManagedTensor (the struct behind the "dltensor" capsule that every framework's
// from_dlpack / to_dlpack accepts). Declared here without <dlpack/dlpack.h>, so including
// flashpage needs no DLPack header; a caller that builds or reads the struct includes it.
#include "flashpage/tensor.h"

struct DLManagedTensor;

namespace flashpage {

// A tensor over `managed`'s memory (no copy) that calls managed->deleter when its last
// reference goes. Takes ownership only on success: when it throws (an Error naming the field,
// what is supported and what was given), the caller still owns `managed`, as DLPack's
// capsule protocol expects. Supported: dtypes f32/f16/bf16 (float, bfloat), i32/i64 (int)
// and bool (DLPack's code 6, 8 bits), one lane; devices CPU, CUDA host memory (a CPU
// tensor) and CUDA (cuda:device_id); any non-negative strides (null: contiguous) and a
// byte_offset.
Tensor from_dlpack(DLManagedTensor* managed);

// `t` as a DLManagedTensor that keeps t's memory alive until its deleter is called (the
// consumer calls it, once). f8 tensors have no DLPack 0.6 code: an Error. The shape and
// strides arrays live in the returned struct.
DLManagedTensor* to_dlpack(const Tensor& t);

}  // namespace flashpage
