// f16 instances of the tensor-core prefill.
#include "cuda/prefill_tc/prefill_tc_launch.cuh"

namespace flashpage::cuda::prefill_tc {
template void launch<__half, 64>(const KernelArgs&, int64_t, cudaStream_t);
template void launch<__half, 128>(const KernelArgs&, int64_t, cudaStream_t);
template void launch<__half, 256>(const KernelArgs&, int64_t, cudaStream_t);
}  // namespace flashpage::cuda::prefill_tc
