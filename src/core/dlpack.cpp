// from_dlpack / to_dlpack: the mapping between DLPack's DLTensor fields and Tensor, checked
// field by field so that a foreign tensor flashpage cannot address is an Error, not a view.
#include "flashpage/dlpack.h"

#include <dlpack/dlpack.h>

#include <algorithm>
#include <memory>
#include <string>

#include "core/check.h"

namespace flashpage {
namespace {

// DLPack 0.8's kDLBool: the 0.6 header (Debian's) does not name it; frameworks send it.
constexpr uint8_t kDLBoolCode = 6;

DType dtype_from(DLDataType t) {
  check::require(t.lanes == 1, "from_dlpack: dl_tensor.dtype.lanes: expected 1, got ",
                 int(t.lanes));
  const int code = t.code, bits = t.bits;
  if (code == kDLFloat && bits == 32) return DType::f32;
  if (code == kDLFloat && bits == 16) return DType::f16;
  if (code == kDLBfloat && bits == 16) return DType::bf16;
  if (code == kDLInt && bits == 32) return DType::i32;
  if (code == kDLInt && bits == 64) return DType::i64;
  if (code == kDLBoolCode && bits == 8) return DType::boolean;
  check::fail("from_dlpack: dl_tensor.dtype: expected float32/16, bfloat16, int32/64 or bool, "
              "got code ", code, " with ", bits, " bits");
}

DLDataType dtype_to(DType t) {
  switch (t) {
    case DType::f32: return {uint8_t(kDLFloat), 32, 1};
    case DType::f16: return {uint8_t(kDLFloat), 16, 1};
    case DType::bf16: return {uint8_t(kDLBfloat), 16, 1};
    case DType::i32: return {uint8_t(kDLInt), 32, 1};
    case DType::i64: return {uint8_t(kDLInt), 64, 1};
    case DType::boolean: return {kDLBoolCode, 8, 1};
    default:
      check::fail("to_dlpack: tensor: expected a dtype with a DLPack 0.6 code (f32, f16, bf16, "
                  "i32, i64, bool), got ", dtype_name(t));
  }
}

Device device_from(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:  // page-locked host memory: addressed by the host like any other
      return Device::cpu();
    case kDLCUDA:
      check::require(d.device_id >= 0, "from_dlpack: dl_tensor.device.device_id: expected >= 0, "
                     "got ", d.device_id);
      return Device::cuda(d.device_id);
    default:
      check::fail("from_dlpack: dl_tensor.device.device_type: expected CPU (1), CUDA (2) or "
                  "CUDA host (3), got ", int(d.device_type));
  }
}

// What to_dlpack hands out: the struct, the arrays it points to and the tensor that keeps the
// memory alive, freed together by the deleter.
struct Export {
  DLManagedTensor managed{};
  Tensor tensor;
  Shape shape, strides;
};

}  // namespace

Tensor from_dlpack(DLManagedTensor* managed) {
  check::require(managed != nullptr, "from_dlpack: expected a DLManagedTensor, got null");
  const DLTensor& t = managed->dl_tensor;
  check::require(t.ndim >= 0, "from_dlpack: dl_tensor.ndim: expected >= 0, got ", t.ndim);
  check::require(t.ndim == 0 || t.shape != nullptr,
                 "from_dlpack: dl_tensor.shape: expected ", t.ndim, " sizes, got null");
  const DType dtype = dtype_from(t.dtype);
  const Device device = device_from(t.device);
  const Shape shape(t.shape, t.shape + t.ndim);
  Shape strides;
  if (t.strides != nullptr) strides.assign(t.strides, t.strides + t.ndim);
  for (int64_t s : strides)
    check::require(s >= 0, "from_dlpack: dl_tensor.strides: expected non-negative strides, got ",
                   shape_to_string(strides));
  const bool empty = std::any_of(shape.begin(), shape.end(), [](int64_t n) { return n == 0; });
  check::require(t.data != nullptr || empty, "from_dlpack: dl_tensor.data: expected a pointer ",
                 "to the elements of shape ", shape_to_string(shape), ", got null");
  void* data = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  // Every check above and in from_blob comes before the tensor owns `managed`.
  return Tensor::from_blob(data, shape, dtype, device, strides, [managed] {
    if (managed->deleter != nullptr) managed->deleter(managed);
  });
}

DLManagedTensor* to_dlpack(const Tensor& t) {
  check::defined(t, "to_dlpack: tensor");
  const DLDataType dtype = dtype_to(t.dtype());
  auto e = std::make_unique<Export>();
  e->tensor = t;
  e->shape = t.shape();
  e->strides = t.strides();
  DLTensor& d = e->managed.dl_tensor;
  d.data = t.data();
  d.device = t.device().is_cuda() ? DLDevice{kDLCUDA, t.device().index} : DLDevice{kDLCPU, 0};
  d.ndim = int(t.dim());
  d.dtype = dtype;
  d.shape = e->shape.data();
  d.strides = e->strides.data();
  d.byte_offset = 0;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<Export*>(self->manager_ctx);
  };
  return &e.release()->managed;
}

}  // namespace flashpage
