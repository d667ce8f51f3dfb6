// f16 instances of the Hopper prefill.
#include "cuda/prefill_hopper/launch.cuh"

namespace flashpage::cuda::prefill_hopper {
template void launch<__half, 64>(const HopperArgs&, int, cudaStream_t);
template void launch<__half, 64, 3>(const HopperArgs&, int, cudaStream_t);
template void launch<__half, 128>(const HopperArgs&, int, cudaStream_t);
template void launch<__half, 256>(const HopperArgs&, int, cudaStream_t);
}  // namespace flashpage::cuda::prefill_hopper
