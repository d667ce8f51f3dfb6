#pragma once
// The few device services the core needs, implemented by src/cuda/runtime.cu in a CUDA build
// and by src/core/no_cuda.cpp (which throws for CUDA devices) in a CPU-only build.
#include <cstddef>
#include <string>
#include <string_view>

#include "flashpage/device.h"

namespace flashpage::detail {

// cudaMallocAsync / cudaFreeAsync, so frees and reuses are stream-ordered: on `stream`
// (a cudaStream_t), or the legacy default stream when null.
void* cuda_malloc(size_t bytes, int device_index, void* stream = nullptr);
void cuda_free(void* ptr, int device_index, void* stream = nullptr);
// Copies bytes between any two devices. stream == nullptr: on the legacy default stream,
// returning once the bytes have landed. Otherwise ordered on the stream (cudaStream_t): a
// copy from pageable host memory returns once the source is staged (it may be reused at
// once; CUDA may also wait for the stream first, and does for copies of more than about a
// MiB; from page-locked or managed memory the copy is truly asynchronous and the source must
// live until the stream gets there), a copy to the host waits for the stream.
// A host copy on a stream being captured into a CUDA graph is an Error: a graph cannot hold it.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                void* stream = nullptr);
void cuda_memset(void* dst, int value, size_t bytes, int device_index, void* stream = nullptr);
// Throws an Error naming `what` when `stream` is being captured into a CUDA graph: for the
// host work (planning, table uploads) that a graph cannot hold, checked before any state
// changes. Nothing for a null stream or in a CPU-only build.
void check_not_capturing(void* stream, std::string_view what);
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
