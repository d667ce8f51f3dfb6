// cuda::batch_decode: picks the decode kernel for (dtype, head dim), launches it over the
// planned work list, then merges split rows.
#include <cuda_runtime_api.h>

#include "core/check.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/decode_args.h"
#include "cuda/device_types.cuh"
#include "cuda/generic_attention.h"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda {
namespace {

constexpr int kMergeThreads = 256;
constexpr int kMergeWarps = kMergeThreads / 32;
constexpr int kMergeUnroll = 4;  // partial loads in flight per thread

// Block-wide max / sum through shared memory (every thread gets the result).
template <class Op>
__device__ __forceinline__ float block_reduce(float x, float* scratch, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  x = scratch[0];
#pragma unroll
  for (int w = 1; w < kMergeWarps; ++w) x = op(x, scratch[w]);
  __syncthreads();  // scratch is reused by the next reduction
  return x;
}

// One block per (row, query head) of a split row: out = sum_s exp(lse_s - lse) * o_s with
// lse = logsumexp_s(lse_s), the merge rule of SoftmaxState written for many states at once.
// The partials are spread over all threads (dims x slot groups) with several loads in flight
// each, so a row split into a hundred chunks merges at memory speed, not at one load latency
// per chunk.
template <class T>
__global__ void __launch_bounds__(kMergeThreads)
    decode_merge_kernel(const __grid_constant__ DecodeArgs a, int head_dim) {
  __shared__ float scratch[kMergeWarps];
  __shared__ float acc_by_group[kMergeThreads];
  const int row = int(blockIdx.x), head = int(blockIdx.y), tid = int(threadIdx.x);
  const int32_t* ints = a.work_ints;
  const int num_work = ints[0], num_partials = ints[1];
  // Offsets come from the device header so a replayed graph follows a re-plan.
  const int32_t* merge_indptr =
      ints + Workspace::Impl::kHeaderInts + int64_t(num_work) * Workspace::Impl::kWorkFields;
  const int s0 = merge_indptr[row], s1 = merge_indptr[row + 1];
  if (s0 == s1) return;  // not split: the decode kernel wrote this row
  const float* partial_lse = a.partial_out + int64_t(num_partials) * a.num_qo_heads * head_dim;
  auto lse_of = [&](int s) { return partial_lse[int64_t(s) * a.num_qo_heads + head]; };

  float m = kNegInf;
  for (int s = s0 + tid; s < s1; s += kMergeThreads) m = fmaxf(m, lse_of(s));
  m = block_reduce(m, scratch, [](float x, float y) { return fmaxf(x, y); });
  float sum = 0.0f;
  if (m != kNegInf)
    for (int s = s0 + tid; s < s1; s += kMergeThreads) sum += __expf(lse_of(s) - m);
  sum = block_reduce(sum, scratch, [](float x, float y) { return x + y; });
  const float lse = m == kNegInf ? kNegInf : m + __logf(sum);

  const int groups = kMergeThreads / head_dim;  // head_dim <= 256 divides 256
  const int dim = tid % head_dim, group = tid / head_dim;
  float acc = 0.0f;
  if (lse != kNegInf && group < groups) {
    int s = s0 + group;
    for (; s + (kMergeUnroll - 1) * groups < s1; s += kMergeUnroll * groups) {
      float w[kMergeUnroll], o[kMergeUnroll];
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {
        const int su = s + u * groups;
        w[u] = lse_of(su);
        o[u] = a.partial_out[(int64_t(su) * a.num_qo_heads + head) * head_dim + dim];
      }
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) acc += __expf(w[u] - lse) * o[u];
    }
    for (; s < s1; s += groups)
      acc += __expf(lse_of(s) - lse) *
             a.partial_out[(int64_t(s) * a.num_qo_heads + head) * head_dim + dim];
  }
  acc_by_group[tid] = acc;
  __syncthreads();
  if (group == 0) {
    for (int g = 1; g < groups; ++g) acc += acc_by_group[g * head_dim + dim];
    T* out = static_cast<T*>(a.out);
    out[int64_t(row) * a.out_stride_batch + int64_t(head) * a.out_stride_head + dim] =
        from_float<T>(acc);
    if (a.lse != nullptr && dim == 0)
      a.lse[int64_t(row) * a.lse_stride_batch + int64_t(head) * a.lse_stride_head] = lse;
  }
}

template <class T>
void dispatch_head_dim(const DecodeArgs& args, int64_t head_dim, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
    case 64: launch_paged_decode<T, 64>(args, grid, stream); return;
    case 128: launch_paged_decode<T, 128>(args, grid, stream); return;
    case 256: launch_paged_decode<T, 256>(args, grid, stream); return;
    default:
      check::fail("batch_decode: head_dim ", head_dim,
                  " is not supported by the CUDA decode kernel (expected 64, 128 or 256)");
  }
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FP_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// f32 pages: the generic kernel, one warp per (row, head), whole rows (no split needed).
void decode_generic(const Plan& plan, const Tensor& q, const PagedKv& kv,
                    const AttentionParams& params, Tensor& out, const Tensor& lse,
                    cudaStream_t stream) {
  GenericArgs g;
  g.dtype = q.dtype();
  g.q = {q.data(), q.stride(0), 0, q.stride(1)};
  g.out = {out.data(), out.stride(0), 0, out.stride(1)};
  if (lse.defined()) {
    g.lse = lse.data_as<float>();
    g.lse_stride_batch = lse.stride(0);
    g.lse_stride_head = lse.stride(1);
  }
  g.queries = {nullptr, 1, int32_t(plan.batch_size)};
  g.causal = false;  // the single query is the last position: it sees every key
  g.bottom_right = true;
  g.window_left = params.window_left;
  g.scale = params.scale;
  g.logits_soft_cap = params.logits_soft_cap;
  g.num_qo_heads = int32_t(plan.num_qo_heads);
  g.group_size = int32_t(plan.num_qo_heads / plan.num_kv_heads);
  g.head_dim = int32_t(plan.head_dim);
  g.num_tokens = plan.batch_size;
  launch_generic_paged(g, make_page_table_view(kv), kv.k_pages.data(), kv.v_pages.data(), stream);
}

}  // namespace

void batch_decode(const Workspace::Impl& ws, const Plan& plan, const Tensor& q, const PagedKv& kv,
                  const AttentionParams& params, Tensor& out, const Tensor& lse, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (plan.batch_size == 0 || plan.num_qo_heads == 0) return;
  if (q.dtype() == DType::f32) {
    decode_generic(plan, q, kv, params, out, lse, stream);
    return;
  }
  check::require(q.stride(2) == 1 && out.stride(2) == 1,
                 "batch_decode: expected q and out with a contiguous last dim on CUDA");
  DecodeArgs args;
  args.q = q.data();
  args.q_stride_batch = q.stride(0);
  args.q_stride_head = q.stride(1);
  args.k_pages = kv.k_pages.data();
  args.v_pages = kv.v_pages.data();
  args.pages = make_page_table_view(kv);
  args.out = out.data();
  args.out_stride_batch = out.stride(0);
  args.out_stride_head = out.stride(1);
  if (lse.defined()) {
    args.lse = lse.data_as<float>();
    args.lse_stride_batch = lse.stride(0);
    args.lse_stride_head = lse.stride(1);
  }
  args.work_ints = ws.device_ints();
  args.partial_out = ws.partial_out();
  args.num_qo_heads = int32_t(plan.num_qo_heads);
  args.num_kv_heads = int32_t(plan.num_kv_heads);
  args.group_size = int32_t(plan.num_qo_heads / plan.num_kv_heads);
  args.scale = params.scale;
  args.logits_soft_cap = params.logits_soft_cap;
  args.window_left = params.window_left;

  if (plan.grid > 0) {
    // KV heads fastest (see decode_kernel.cuh); blocks past grid.y's limit loop over items.
    constexpr int64_t kMaxGridY = 65535;
    const dim3 grid(unsigned(plan.num_kv_heads), unsigned(std::min(plan.grid, kMaxGridY)),
                    unsigned((args.group_size + kDecodeHeadsPerBlock - 1) / kDecodeHeadsPerBlock));
    if (q.dtype() == DType::bf16)
      dispatch_head_dim<__nv_bfloat16>(args, plan.head_dim, grid, stream);
    else if (q.dtype() == DType::f16)
      dispatch_head_dim<__half>(args, plan.head_dim, grid, stream);
    else
      check::fail("batch_decode: dtype ", dtype_name(q.dtype()), " is not supported on CUDA");
  }
  // A graph captured now may replay a later plan that splits rows: always merge then.
  if (plan.num_partials > 0 || is_capturing(stream)) {
    const dim3 grid(unsigned(plan.batch_size), unsigned(plan.num_qo_heads));
    if (q.dtype() == DType::bf16)
      decode_merge_kernel<__nv_bfloat16><<<grid, kMergeThreads, 0, stream>>>(args, int(plan.head_dim));
    else
      decode_merge_kernel<__half><<<grid, kMergeThreads, 0, stream>>>(args, int(plan.head_dim));
    FP_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace flashpage::cuda
