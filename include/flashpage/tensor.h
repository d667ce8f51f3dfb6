#pragma once
// Tensor: reference-counted storage + shape + strides (in elements) + dtype + device,
// a small at::Tensor. Default-constructed = undefined, the seed's "null" argument.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "flashpage/device.h"
#include "flashpage/dtype.h"

namespace flashpage {

using Shape = std::vector<int64_t>;

struct Storage;  // owning or borrowed bytes on one device (src/core/storage.h)

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A GPU tensor allocated and, when its last reference goes, freed in the order of `stream`
  // (a cudaStream_t that must outlive the tensor): scratch for work queued on that stream,
  // whose memory no other allocation takes before that work is done. The plain form orders
  // both on the legacy default stream. CPU: the plain form.
  static Tensor empty(const Shape& shape, DType dtype, Device device, void* stream);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Borrows memory the caller keeps alive; strides default to contiguous.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype,
                          Device device = Device::cpu(), const Shape& strides = {});
  // The same, and `release` runs when the last tensor viewing the memory goes (the owner's
  // deleter: a DLPack import, a framework's buffer). Not run when from_blob throws.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device,
                          const Shape& strides, std::function<void()> release);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* data() const;  // address of element 0
  template <class T>
  T* data_as() const { return static_cast<T*>(data()); }

  Tensor to(Device device) const;   // copy unless already there
  Tensor to(DType dtype) const;     // host conversion (CPU tensors; CUDA goes through the host)
  Tensor contiguous() const;        // self when already contiguous
  Tensor clone() const;             // always a fresh contiguous copy
  Tensor view(const Shape& shape) const;  // contiguous only; one -1 allowed
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor slice(int64_t d, int64_t start, int64_t end) const;  // [start, end) along d
  Tensor select(int64_t d, int64_t index) const;              // drops dim d
  // Same storage, new shape and strides from this tensor's first element (strides may be 0:
  // broadcasting). The caller keeps every addressed element inside the storage.
  Tensor as_strided(const Shape& shape, const Shape& strides) const;

  // Copies src's elements into this tensor (same shape; any strides, device and dtype —
  // dtype conversion happens on the host). stream (a cudaStream_t; nullptr: the legacy
  // default stream, and the copy is synchronous): a copy to the GPU is ordered on it and
  // returns once the host bytes are staged (from page-locked host memory it is truly
  // asynchronous: keep the source until the stream has done), a copy from the GPU waits
  // for it.
  void copy_(const Tensor& src, void* stream = nullptr);
  // Sets every element (floating types accept NaN / inf: used to poison outputs).
  void fill_(double value);

  std::string shape_str() const;  // "[2,8,64]"
  std::string str() const;        // "bf16[2,8,64] on cuda:0"

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // elements
  Shape shape_, strides_;
  DType dtype_ = DType::f32;
  Device device_{};
};

Shape contiguous_strides(const Shape& shape);
std::string shape_to_string(const Shape& shape);

}  // namespace flashpage
