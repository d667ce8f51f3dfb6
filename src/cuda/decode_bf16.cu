// Paged decode instances for bf16 pages (one translation unit per dtype: parallel builds).
#include "cuda/decode_kernel.cuh"

namespace flashpage::cuda {
template void launch_paged_decode<__nv_bfloat16, 64>(const DecodeArgs&, dim3, cudaStream_t);
template void launch_paged_decode<__nv_bfloat16, 128>(const DecodeArgs&, dim3, cudaStream_t);
template void launch_paged_decode<__nv_bfloat16, 256>(const DecodeArgs&, dim3, cudaStream_t);
}  // namespace flashpage::cuda
