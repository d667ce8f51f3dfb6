// The CUDA implementation of src/core/device_memory.h: stream-ordered allocation (the legacy
// default stream unless a stream is given), copies, memset, device queries, DeviceScope.
#include <cuda_runtime_api.h>

#include <cstring>

#include <string>

#include "core/device_memory.h"
#include "cuda/cuda_check.h"
#include "flashpage/error.h"

namespace flashpage::detail {
namespace {

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

DeviceScope::DeviceScope(Device device) {
  if (!device.is_cuda()) return;
  int current = 0;
  FP_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device.index) return;
  FP_CUDA_CHECK(cudaSetDevice(device.index));
  previous_ = current;
}

DeviceScope::~DeviceScope() {
  // Runs during unwinding too: never throw.
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

void* cuda_malloc(size_t bytes, int device_index, void* stream) {
  if (bytes == 0) return nullptr;
  DeviceScope scope(Device::cuda(device_index));
  void* ptr = nullptr;
  // Legacy default stream (null): frees and reuses are ordered with everything on it and
  // with blocking streams; scratch for work on another stream is ordered on that stream.
  FP_CUDA_CHECK(cudaMallocAsync(&ptr, bytes, as_stream(stream)));
  return ptr;
}

void cuda_free(void* ptr, int device_index, void* stream) {
  if (ptr == nullptr) return;
  // Runs from destructors: never throw. A failure here (driver shutting down) is ignored.
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != device_index) (void)cudaSetDevice(device_index);
  if (cudaFreeAsync(ptr, as_stream(stream)) != cudaSuccess) (void)cudaGetLastError();
  if (previous != device_index) (void)cudaSetDevice(previous);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                void* stream) {
  if (bytes == 0) return;
  int index = dst_device.is_cuda() ? dst_device.index
              : src_device.is_cuda() ? src_device.index
                                     : -1;
  if (index < 0) {  // host to host: no CUDA call, so a CUDA build works without a driver
    std::memmove(dst, src, bytes);
    return;
  }
  DeviceScope scope(Device::cuda(index));
  if (stream == nullptr) {
    // On the legacy stream (the allocator's), then waited for: a plain cudaMemcpy may return
    // from a pageable source once it is staged, before the bytes land, and a device-to-device
    // one does not wait at all; a caller without a stream expects them landed.
    FP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamLegacy));
    FP_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    return;
  }
  const bool to_host = dst_device.is_cpu();
  if (to_host || src_device.is_cpu())
    check_not_capturing(stream, to_host ? "a copy to the host" : "a copy from the host");
  FP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)));
  if (to_host) FP_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
}

void check_not_capturing(void* stream, std::string_view what) {
  if (stream == nullptr) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FP_CUDA_CHECK(cudaStreamIsCapturing(as_stream(stream), &capture));
  if (capture != cudaStreamCaptureStatusNone)
    throw Error(std::string(what) +
                ": refused on a stream being captured into a CUDA graph (host work that a "
                "graph cannot hold); plan_*, KvCachePool::metadata()/put() and reads of "
                "device values go before the capture, only the runs are capturable");
}

void cuda_memset(void* dst, int value, size_t bytes, int device_index, void* stream) {
  if (bytes == 0) return;
  DeviceScope scope(Device::cuda(device_index));
  if (stream == nullptr) {
    FP_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, cudaStream_t(0)));
    FP_CUDA_CHECK(cudaStreamSynchronize(cudaStream_t(0)));
  } else {
    FP_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, as_stream(stream)));
  }
}

int cuda_device_count() {
  int count = 0;
  // No driver, no GPU, or a driver too old: all mean "no CUDA device here", not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

int cuda_sm_count(int device_index) {
  int count = 0;
  FP_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device_index));
  return count;
}

std::string cuda_device_name(int device_index) {
  cudaDeviceProp prop{};
  FP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  return "cuda:" + std::to_string(device_index) + " " + prop.name + " (" +
         std::to_string(prop.multiProcessorCount) + " SMs)";
}

void cuda_synchronize(int device_index) {
  DeviceScope scope(Device::cuda(device_index));
  FP_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace flashpage::detail

namespace flashpage {
bool cuda_built() { return true; }
}  // namespace flashpage
