// Streamed (sm_90) decode instances for bf16 pages (one translation unit per dtype).
#include "cuda/decode_stream_kernel.cuh"

namespace flashpage::cuda {
template void launch_stream_decode<__nv_bfloat16, 64>(const StreamDecodeArgs&, int, cudaStream_t);
template void launch_stream_decode<__nv_bfloat16, 128>(const StreamDecodeArgs&, int, cudaStream_t);
template void launch_stream_decode<__nv_bfloat16, 256>(const StreamDecodeArgs&, int, cudaStream_t);

const void* stream_decode_probe_kernel() {
  return reinterpret_cast<const void*>(&stream_decode_kernel<__nv_bfloat16, 128, 8>);
}
}  // namespace flashpage::cuda
