// cuda::merge_states: combines two partial results over disjoint key sets with the same
// SoftmaxState algebra the decode split merge uses. A block per (token, head), grid-strided.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/check.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/device_types.cuh"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda {
namespace {

constexpr int kMaxThreads = 256;

struct StateRef {
  void* v = nullptr;
  DType dtype = DType::f32;
  int64_t stride_n = 0, stride_h = 0, stride_d = 1;
  float* lse = nullptr;
  int64_t lse_stride_n = 0, lse_stride_h = 0;

  __device__ __forceinline__ int64_t at(int64_t n, int64_t h, int64_t d) const {
    return n * stride_n + h * stride_h + d * stride_d;
  }
};

// Grid-stride over (token, head) pairs, so any N x H fits the grid. Thread 0 writes the
// merged LSE whatever head_dim is (at D = 0 the LSE is the whole result, as on the CPU).
__global__ void merge_states_kernel(StateRef a, StateRef b, StateRef out, int64_t pairs,
                                    int32_t num_heads, int32_t head_dim) {
  for (int64_t pair = blockIdx.x; pair < pairs; pair += gridDim.x) {
    const int64_t n = pair / num_heads, h = pair % num_heads;
    const float lse_a = a.lse[n * a.lse_stride_n + h * a.lse_stride_h];
    const float lse_b = b.lse[n * b.lse_stride_n + h * b.lse_stride_h];
    // lse_out may alias lse_a: every thread has read it before thread 0 writes it. The
    // barrier is uniform: every thread of the block runs the same pairs.
    __syncthreads();
    for (int32_t d = int32_t(threadIdx.x); d < head_dim; d += int32_t(blockDim.x)) {
      SoftmaxState<1> st, other;
      const float va[1] = {load_as_float(a.v, a.dtype, a.at(n, h, d))};
      const float vb[1] = {load_as_float(b.v, b.dtype, b.at(n, h, d))};
      st.set_normalized(va, lse_a);
      other.set_normalized(vb, lse_b);
      st.merge(other);
      store_from_float(out.v, out.dtype, out.at(n, h, d), st.normalized(0));
    }
    if (out.lse != nullptr && threadIdx.x == 0) {
      SoftmaxState<1> st, other;
      const float zero[1] = {0.0f};
      st.set_normalized(zero, lse_a);
      other.set_normalized(zero, lse_b);
      st.merge(other);
      out.lse[n * out.lse_stride_n + h * out.lse_stride_h] = st.lse();
    }
    __syncthreads();  // the next pair's lse_a reads come after this pair's lse_out write
  }
}

StateRef state_ref(const Tensor& v, const Tensor& lse) {
  StateRef r;
  r.v = v.data();
  r.dtype = v.dtype();
  r.stride_n = v.stride(0);
  r.stride_h = v.stride(1);
  r.stride_d = v.stride(2);
  if (lse.defined()) {
    r.lse = lse.data_as<float>();
    r.lse_stride_n = lse.stride(0);
    r.lse_stride_h = lse.stride(1);
  }
  return r;
}

void check_float(const Tensor& t, const char* name) {
  check::require(t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16,
                 name, ": expected f32, f16 or bf16 on CUDA, got ", dtype_name(t.dtype()));
}

}  // namespace

void merge_states(const Tensor& v_a, const Tensor& lse_a, const Tensor& v_b, const Tensor& lse_b,
                  Tensor& v_out, const Tensor& lse_out, void* stream) {
  check_float(v_a, "v_a");
  check_float(v_b, "v_b");
  check_float(v_out, "v_out");
  const int64_t tokens = v_a.size(0), heads = v_a.size(1), dim = v_a.size(2);
  const int64_t pairs = tokens * heads;
  if (pairs == 0 || (dim == 0 && !lse_out.defined())) return;
  // A warp at least (D = 0 still writes the LSE), at most kMaxThreads per block; the grid is
  // capped well below the 2^31 - 1 limit and strides over the rest.
  const unsigned threads = unsigned(std::clamp<int64_t>(dim, 32, kMaxThreads));
  const unsigned blocks = unsigned(std::min<int64_t>(pairs, int64_t(1) << 20));
  merge_states_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      state_ref(v_a, lse_a), state_ref(v_b, lse_b), state_ref(v_out, lse_out), pairs,
      int32_t(heads), int32_t(dim));
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda
