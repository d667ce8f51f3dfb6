// CPU-only build: every CUDA service reports that CUDA is not built in.
#include <cstring>

#include "core/device_memory.h"
#include "flashpage/error.h"

namespace flashpage::detail {
namespace {
[[noreturn]] void not_built() {
  throw Error("flashpage was built without CUDA (FLASHPAGE_CUDA=OFF or no nvcc found): "
              "CUDA tensors and ops are unavailable");
}
}  // namespace

void* cuda_malloc(size_t, int, void*) { not_built(); }
void cuda_free(void*, int, void*) {}
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                void*) {
  if (dst_device.is_cuda() || src_device.is_cuda()) not_built();
  if (bytes) std::memmove(dst, src, bytes);
}
void cuda_memset(void*, int, size_t, int, void*) { not_built(); }
void check_not_capturing(void*, std::string_view) {}
int cuda_device_count() { return 0; }
int cuda_sm_count(int) { not_built(); }
std::string cuda_device_name(int) { not_built(); }
void cuda_synchronize(int) { not_built(); }
DeviceScope::DeviceScope(Device) {}
DeviceScope::~DeviceScope() = default;

}  // namespace flashpage::detail

namespace flashpage {
bool cuda_built() { return false; }
}  // namespace flashpage
