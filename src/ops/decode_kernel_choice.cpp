#include "ops/decode_kernel_choice.h"

#include <cstdlib>
#include <cstring>

#ifdef FLASHPAGE_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

namespace flashpage {

namespace {

bool forced_split() {
  static const bool forced = [] {
    const char* v = std::getenv("FLASHPAGE_DECODE_KERNEL");
    return v != nullptr && std::strcmp(v, "split") == 0;
  }();
  return forced;
}

}  // namespace

DecodeKernel choose_decode_kernel(Device device, DType dtype, int64_t head_dim) {
  if (!device.is_cuda()) return DecodeKernel::cpu;
  const bool tensor_core_dtype = dtype == DType::bf16 || dtype == DType::f16;
  const bool tiled_head_dim = head_dim == 64 || head_dim == 128 || head_dim == 256;
  if (!tensor_core_dtype || !tiled_head_dim) return DecodeKernel::generic;
#ifdef FLASHPAGE_WITH_CUDA
  if (!forced_split() && cuda::stream_decode_runs_on(device.index)) return DecodeKernel::stream;
#endif
  return DecodeKernel::split;
}

const char* decode_kernel_name(DecodeKernel kernel) {
  switch (kernel) {
    case DecodeKernel::cpu: return "cpu";
    case DecodeKernel::split: return "split";
    case DecodeKernel::stream: return "stream";
    case DecodeKernel::generic: return "generic";
  }
  return "?";
}

}  // namespace flashpage
