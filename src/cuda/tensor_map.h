#pragma once
// Host encoding of TMA tensor maps (the descriptors cp.async.bulk.tensor reads), through the
// driver entry point the CUDA runtime hands out, so the library does not link libcuda itself
// (a build without a GPU driver still links; the call fails at run time there and the caller
// keeps its non-TMA path).
#include <cuda.h>

#include <cstdint>

namespace flashpage::cuda {

// A map of 16-bit elements of rank 2..5: dims[0] contiguous, dims[i] (i >= 1) at byte stride
// strides[i - 1] (multiples of 16, < 2^40; any order), boxes of box[0] x ... elements landing
// in shared memory in the 128-byte swizzle (box[0] * 2 must be 128: one swizzle row per box
// row; box dims in order, dims[0] fastest). False when the driver entry point is missing or
// the driver refuses the map (the caller then does not use TMA); nothing is thrown.
// l2_promotion_bytes: 0, 64, 128 or 256 (the size L2 fetches a request up to).
bool encode_tensor_map_16bit_swizzle128(CUtensorMap& map, const void* base, int rank,
                                        const uint64_t* dims, const uint64_t* strides,
                                        const uint32_t* box, int l2_promotion_bytes = 256);

template <int kRank>
bool encode_tensor_map_16bit_swizzle128(CUtensorMap& map, const void* base,
                                        const uint64_t (&dims)[kRank],
                                        const uint64_t (&strides)[kRank - 1],
                                        const uint32_t (&box)[kRank],
                                        int l2_promotion_bytes = 256) {
  return encode_tensor_map_16bit_swizzle128(map, base, kRank, dims, strides, box,
                                            l2_promotion_bytes);
}

}  // namespace flashpage::cuda
