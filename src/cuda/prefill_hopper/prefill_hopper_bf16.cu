// bf16 instances of the Hopper prefill.
#include "cuda/prefill_hopper/launch.cuh"

namespace flashpage::cuda::prefill_hopper {
template void launch<__nv_bfloat16, 64>(const HopperArgs&, int, cudaStream_t);
template void launch<__nv_bfloat16, 64, 3>(const HopperArgs&, int, cudaStream_t);
template void launch<__nv_bfloat16, 128>(const HopperArgs&, int, cudaStream_t);
template void launch<__nv_bfloat16, 256>(const HopperArgs&, int, cudaStream_t);
}  // namespace flashpage::cuda::prefill_hopper
