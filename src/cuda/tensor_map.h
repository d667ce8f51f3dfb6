#pragma once
// Host encoding of TMA tensor maps (the descriptors cp.async.bulk.tensor reads), through the
// driver entry point the CUDA runtime hands out, so the library does not link libcuda itself
// (a build without a GPU driver still links; the call fails at run time there and the caller
// keeps its non-TMA path).
#include <cuda.h>

#include <cstdint>

namespace flashpage::cuda {

// A 3-D map of 16-bit elements: dims[0] contiguous, dims[1] and dims[2] at byte strides
// strides[0] and strides[1] (multiples of 16, < 2^40), boxes of box[0] x box[1] x box[2]
// elements landing in shared memory in the 128-byte swizzle (box[0] * 2 must be 128: one
// swizzle row per box row). False when the driver entry point is missing or the driver
// refuses the map (the caller then does not use TMA); nothing is thrown.
bool encode_tensor_map_3d_16bit_swizzle128(CUtensorMap& map, const void* base,
                                           const uint64_t (&dims)[3],
                                           const uint64_t (&strides)[2],
                                           const uint32_t (&box)[3]);

}  // namespace flashpage::cuda
