#pragma once
// The few device services the core needs, implemented by src/cuda/runtime.cu in a CUDA build
// and by src/core/no_cuda.cpp (which throws for CUDA devices) in a CPU-only build.
#include <cstddef>
#include <string>

#include "flashpage/device.h"

namespace flashpage::detail {

// cudaMallocAsync on the legacy default stream, so frees and reuses are stream-ordered.
void* cuda_malloc(size_t bytes, int device_index);
void cuda_free(void* ptr, int device_index);
// Copies bytes between any two devices. stream == nullptr: synchronous; otherwise ordered on
// the stream (cudaStream_t).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                void* stream = nullptr);
void cuda_memset(void* dst, int value, size_t bytes, int device_index, void* stream = nullptr);
int cuda_device_count();  // 0 when not built with CUDA or no GPU visible
void cuda_synchronize(int device_index);

// Makes a CUDA device current for the scope, so kernel launches, attribute queries and the
// per-device caches keyed on the current device go to the tensors' GPU whatever the caller
// had current; the caller's device comes back at the end. Nothing for the CPU, and nothing
// in a CPU-only build (the ops report that CUDA is not built).
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;  // the caller's device, -1 when nothing was switched
};

}  // namespace flashpage::detail

namespace flashpage::detail {
int cuda_sm_count(int device_index);  // multiprocessors, for the planners
std::string cuda_device_name(int device_index);  // "cuda:0 NVIDIA H200 (132 SMs)"
}  // namespace flashpage::detail
