// cuda::batch_decode: picks the decode kernel for (dtype, head dim), launches it over the
// planned work list, then merges split rows.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdint>

#include "core/check.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_ops.h"
#include "cuda/decode_args.h"
#include "cuda/device_types.cuh"
#include "cuda/generic_attention.h"
#include "cuda/ptx_sm90.cuh"
#include "cuda/softmax_state.cuh"
#include "ops/decode_kernel_choice.h"
#include "ops/decode_tiling.h"

namespace flashpage::cuda {
namespace {

constexpr int kMergeThreads = 256;
constexpr int kMergeWarps = kMergeThreads / 32;
constexpr int kMergeUnroll = 4;  // partial rows in flight per thread

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
  __shared__ float4 acc_by_group[kMergeThreads];
  // Launched as a programmatic dependent of the streamed decode kernel: its blocks may start
  // while that kernel's last blocks finish, and wait here for its partials.
  ptx::griddepcontrol_wait();
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

  // Four dims per thread (16-byte loads): head_dim / 4 lanes cover a partial row, so
  // 256 / (head_dim / 4) slot groups walk the slots side by side.
  const int lanes = head_dim / 4, groups = kMergeThreads / lanes;  // head_dim in {64,128,256}
  const int dim = (tid % lanes) * 4, group = tid / lanes;
  auto row_of = [&](int s) {
    return *reinterpret_cast<const float4*>(
        a.partial_out + (int64_t(s) * a.num_qo_heads + head) * head_dim + dim);
  };
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto add = [&](float w, float4 o) {
    acc.x += w * o.x;
    acc.y += w * o.y;
    acc.z += w * o.z;
    acc.w += w * o.w;
  };
  if (lse != kNegInf) {
    int s = s0 + group;
    for (; s + (kMergeUnroll - 1) * groups < s1; s += kMergeUnroll * groups) {
      float w[kMergeUnroll];
      float4 o[kMergeUnroll];
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {
        w[u] = lse_of(s + u * groups);
        o[u] = row_of(s + u * groups);
      }
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) add(__expf(w[u] - lse), o[u]);
    }
    for (; s < s1; s += groups) add(__expf(lse_of(s) - lse), row_of(s));
  }
  acc_by_group[tid] = acc;
  __syncthreads();
  if (group == 0) {
    for (int g = 1; g < groups; ++g) {
      const float4 o = acc_by_group[g * lanes + tid];
      acc.x += o.x;
      acc.y += o.y;
      acc.z += o.z;
      acc.w += o.w;
    }
    T* out = static_cast<T*>(a.out) + int64_t(row) * a.out_stride_batch +
             int64_t(head) * a.out_stride_head + dim;
    out[0] = from_float<T>(acc.x);
    out[1] = from_float<T>(acc.y);
    out[2] = from_float<T>(acc.z);
    out[3] = from_float<T>(acc.w);
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

template <class T>
void dispatch_stream_head_dim(const StreamDecodeArgs& args, int64_t head_dim, int grid,
                              cudaStream_t stream) {
  switch (head_dim) {
    case 64: launch_stream_decode<T, 64>(args, grid, stream); return;
    case 128: launch_stream_decode<T, 128>(args, grid, stream); return;
    default: launch_stream_decode<T, 256>(args, grid, stream); return;
  }
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FP_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// The split merge over (row, query head); `programmatic`: may start before the previous
// kernel on the stream has finished (it waits in griddepcontrol.wait), hiding its launch.
template <class T>
void launch_merge(const DecodeArgs& args, int batch, int heads, int head_dim, bool programmatic,
                  cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(batch), unsigned(heads));
  config.blockDim = dim3(kMergeThreads);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  FP_CUDA_CHECK(cudaLaunchKernelEx(&config, decode_merge_kernel<T>, args, head_dim));
}

// Experiment knobs, read once (bench/NOTES.md records what they showed):
// FLASHPAGE_DECODE_STAGES=N caps the streamed kernel's ring depth (>= 2),
// FLASHPAGE_DECODE_L2_HINT=0 drops its L2 evict-first hint on K/V copies.
struct StreamKnobs {
  int max_stages = 0;  // 0: as many as fit
  bool l2_hint = true;
};
const StreamKnobs& stream_knobs() {
  static const StreamKnobs knobs = [] {
    StreamKnobs k;
    if (const char* v = std::getenv("FLASHPAGE_DECODE_STAGES")) k.max_stages = std::atoi(v);
    if (const char* v = std::getenv("FLASHPAGE_DECODE_L2_HINT")) k.l2_hint = std::atoi(v) != 0;
    return k;
  }();
  return knobs;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// What the streamed kernel's 16-byte bulk copies and 4-byte stores need.
bool stream_layout_ok(const DecodeArgs& a) {
  return aligned16(a.q) && aligned16(a.k_pages) && aligned16(a.v_pages) && aligned16(a.out) &&
         a.q_stride_batch % 8 == 0 && a.q_stride_head % 8 == 0 && a.out_stride_batch % 2 == 0 &&
         a.out_stride_head % 2 == 0 && a.pages.stride_page % 8 == 0 &&
         a.pages.stride_token % 8 == 0 && a.pages.stride_head % 8 == 0;
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

  const auto kernel = static_cast<DecodeKernel>(ws.host_ints.size() > 3 ? ws.host_ints[3] : 0);
  if (kernel == DecodeKernel::stream) {
    if (!stream_layout_ok(args)) {  // unaligned views: the generic kernel reads whole rows
      decode_generic(plan, q, kv, params, out, lse, stream);
      return;
    }
    StreamDecodeArgs sa;
    sa.d = args;
    const int heads = StreamDecodeTiling::heads_per_block(args.num_kv_heads, int(plan.head_dim));
    sa.heads_per_block = heads;
    sa.query_groups = StreamDecodeTiling::query_groups(args.group_size);
    const int d = int(plan.head_dim);
    sa.stages = StreamDecodeTiling::stages(heads, d, args.group_size);
    if (stream_knobs().max_stages >= 2) sa.stages = std::min(sa.stages, stream_knobs().max_stages);
    sa.smem_bytes = StreamDecodeTiling::kBarrierBytes +
                    StreamDecodeTiling::query_bytes(heads, d, args.group_size) +
                    sa.stages * StreamDecodeTiling::stage_bytes(heads, d);
    sa.l2_evict_first = stream_knobs().l2_hint;
    sa.heads_contiguous = args.pages.stride_head == plan.head_dim;
    if (q.dtype() == DType::bf16)
      dispatch_stream_head_dim<__nv_bfloat16>(sa, plan.head_dim, int(plan.grid), stream);
    else
      dispatch_stream_head_dim<__half>(sa, plan.head_dim, int(plan.grid), stream);
  } else if (plan.grid > 0) {
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
    const bool programmatic = kernel == DecodeKernel::stream;
    if (q.dtype() == DType::bf16)
      launch_merge<__nv_bfloat16>(args, int(plan.batch_size), int(plan.num_qo_heads),
                                  int(plan.head_dim), programmatic, stream);
    else
      launch_merge<__half>(args, int(plan.batch_size), int(plan.num_qo_heads),
                           int(plan.head_dim), programmatic, stream);
  }
}

bool stream_decode_runs_on(int device_index) {
  static std::atomic<uint64_t> known{0}, runs{0};
  const uint64_t bit = uint64_t(1) << (device_index & 63);
  if (known.load(std::memory_order_acquire) & bit) return (runs.load() & bit) != 0;
  int major = 0;
  FP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_index));
  int current = 0;
  FP_CUDA_CHECK(cudaGetDevice(&current));
  FP_CUDA_CHECK(cudaSetDevice(device_index));
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(
      &attributes, stream_decode_probe_kernel());
  FP_CUDA_CHECK(cudaSetDevice(current));
  // binaryVersion: the machine code that will run (90 for sm_90a). A build without sm_90
  // code would JIT older PTX in which the kernel body is compiled out.
  const bool ok = status == cudaSuccess && major >= 9 && attributes.binaryVersion >= 90 &&
                  attributes.ptxVersion >= 90;
  if (status != cudaSuccess) (void)cudaGetLastError();
  if (ok) runs.fetch_or(bit);
  known.fetch_or(bit, std::memory_order_acq_rel);
  return ok;
}

}  // namespace flashpage::cuda
