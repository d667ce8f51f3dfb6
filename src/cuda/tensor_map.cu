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

bool encode_tensor_map_16bit_swizzle128(CUtensorMap& map, const void* base, int rank,
                                        const uint64_t* dims, const uint64_t* strides,
                                        const uint32_t* box, int l2_promotion_bytes) {
  constexpr int kMaxRank = 5;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_tiled_entry();
  if (encode == nullptr || rank < 2 || rank > kMaxRank || box[0] * 2 != 128) return false;
  const CUtensorMapL2promotion promotion =
      l2_promotion_bytes >= 256   ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
      : l2_promotion_bytes >= 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
      : l2_promotion_bytes >= 64  ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
                                  : CU_TENSOR_MAP_L2_PROMOTION_NONE;
  cuuint64_t global_dims[kMaxRank], global_strides[kMaxRank - 1];
  cuuint32_t box_dims[kMaxRank], element_strides[kMaxRank];
  for (int i = 0; i < rank; ++i) {
    global_dims[i] = dims[i];
    box_dims[i] = box[i];
    element_strides[i] = 1;
    if (i > 0) global_strides[i - 1] = strides[i - 1];
  }
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, cuuint32_t(rank), const_cast<void*>(base),
                global_dims, global_strides, box_dims, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
         CUDA_SUCCESS;
}

}  // namespace flashpage::cuda
