#include "cuda/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace flashpage::cuda {

namespace {

// Resolved once per process; null when the driver does not offer it.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_entry() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // leave no sticky error behind for the next CUDA call
      return PFN_cuTensorMapEncodeTiled_v12000(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return fn;
}

}  // namespace

bool encode_tensor_map_3d_16bit_swizzle128(CUtensorMap& map, const void* base,
                                           const uint64_t (&dims)[3],
                                           const uint64_t (&strides)[2],
                                           const uint32_t (&box)[3]) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_entry();
  if (encode == nullptr || box[0] * 2 != 128) return false;
  cuuint64_t global_dims[3] = {dims[0], dims[1], dims[2]};
  cuuint64_t global_strides[2] = {strides[0], strides[1]};
  cuuint32_t box_dims[3] = {box[0], box[1], box[2]};
  cuuint32_t element_strides[3] = {1, 1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), global_dims,
                global_strides, box_dims, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace flashpage::cuda
