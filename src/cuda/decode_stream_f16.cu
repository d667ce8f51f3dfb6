// Streamed (sm_90) decode instances for f16 pages (one translation unit per dtype).
#include "cuda/decode_stream_kernel.cuh"

namespace flashpage::cuda {
template void launch_stream_decode<__half, 64>(const StreamDecodeArgs&, int, cudaStream_t);
template void launch_stream_decode<__half, 128>(const StreamDecodeArgs&, int, cudaStream_t);
template void launch_stream_decode<__half, 256>(const StreamDecodeArgs&, int, cudaStream_t);
}  // namespace flashpage::cuda
