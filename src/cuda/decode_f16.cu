// Paged decode instances for f16 pages (one translation unit per dtype: parallel builds).
#include "cuda/decode_kernel.cuh"

namespace flashpage::cuda {
template void launch_paged_decode<__half, 64>(const DecodeArgs&, dim3, cudaStream_t);
template void launch_paged_decode<__half, 128>(const DecodeArgs&, dim3, cudaStream_t);
template void launch_paged_decode<__half, 256>(const DecodeArgs&, dim3, cudaStream_t);
}  // namespace flashpage::cuda
