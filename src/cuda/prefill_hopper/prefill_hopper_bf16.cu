// bf16 instances of the Hopper prefill.
#include "cuda/prefill_hopper/launch.cuh"

namespace flashpage::cuda::prefill_hopper {
template void launch<__nv_bfloat16, 64>(const HopperArgs&, int, cudaStream_t);
template void launch<__nv_bfloat16, 64, 3>(const HopperArgs&, int, cudaStream_t);
template void launch<__nv_bfloat16, 128>(const HopperArgs&, int, cudaStream_t);
#if FLASHPAGE_PREFILL_THREE_WG_128
template void launch<__nv_bfloat16, 128, 3>(const HopperArgs&, int, cudaStream_t);
#endif
template void launch<__nv_bfloat16, 256>(const HopperArgs&, int, cudaStream_t);
}  // namespace flashpage::cuda::prefill_hopper
