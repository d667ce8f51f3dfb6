// The generic attention kernel (see generic_attention.h): one warp per (query token, head).
// Each lane scores one key of a 32-key block (full dot product against q in shared memory),
// the warp updates one online-softmax state, then accumulates P.V with lanes over head dims.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check.h"
#include "cuda/cuda_check.h"
#include "cuda/device_types.cuh"
#include "cuda/generic_attention.h"
#include "cuda/softmax_state.cuh"
#include "ops/workspace.h"

namespace flashpage::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kLanes = 32;
constexpr int kMaxDimsPerLane = kGenericMaxHeadDim / kLanes;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, o));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) x += __shfl_xor_sync(kFullMask, x, o);
  return x;
}

__device__ __forceinline__ int32_t row_start(const TokenAddressing& t, int32_t b) {
  return t.indptr != nullptr ? t.indptr[b] : 0;
}
__device__ __forceinline__ int32_t row_length(const TokenAddressing& t, int32_t b) {
  return t.indptr != nullptr ? t.indptr[b + 1] - t.indptr[b] : t.uniform_len;
}
// Row of global query token n: the last b with indptr[b] <= n (skips empty rows).
__device__ __forceinline__ void find_row(const TokenAddressing& t, int64_t n, int32_t& b,
                                         int32_t& i) {
  if (t.indptr == nullptr) {
    b = int32_t(n / t.uniform_len);
    i = int32_t(n % t.uniform_len);
    return;
  }
  int32_t lo = 0, hi = t.batch_size - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (t.indptr[mid] <= n) lo = mid; else hi = mid - 1;
  }
  b = lo;
  i = int32_t(n - t.indptr[lo]);
}

template <class T>
struct PagedSource {
  PageTableView pages;
  const T* k;
  const T* v;
  __device__ __forceinline__ int32_t length(int32_t b) const { return pages.length(b); }
  __device__ __forceinline__ const T* key(int32_t b, int32_t h, int32_t j) const {
    return k + pages.offset(b, j, h);
  }
  __device__ __forceinline__ const T* value(int32_t b, int32_t h, int32_t j) const {
    return v + pages.offset(b, j, h);
  }
};

template <class T>
struct StridedSource {
  StridedKv kv;
  __device__ __forceinline__ int32_t length(int32_t b) const { return row_length(kv.rows, b); }
  __device__ __forceinline__ const T* at(const StridedRef& r, int32_t b, int32_t h,
                                         int32_t j) const {
    return static_cast<const T*>(r.ptr) + int64_t(b) * r.stride_batch +
           int64_t(row_start(kv.rows, b) + j) * r.stride_token + int64_t(h) * r.stride_head;
  }
  __device__ __forceinline__ const T* key(int32_t b, int32_t h, int32_t j) const {
    return at(kv.k, b, h, j);
  }
  __device__ __forceinline__ const T* value(int32_t b, int32_t h, int32_t j) const {
    return at(kv.v, b, h, j);
  }
};

// Applies the mask to a scaled logit (natural domain); false: the key is masked out.
__device__ __forceinline__ float apply_mask(const MaskView& m, float x, int32_t b, int32_t h,
                                            int32_t i, int32_t j) {
  if (m.kind == MaskKind::none) return x;
  const int64_t at = int64_t(b) * m.stride_batch + int64_t(h) * m.stride_head +
                     int64_t(i) * m.stride_query + int64_t(j) * m.stride_key;
  if (m.kind == MaskKind::boolean) return static_cast<const uint8_t*>(m.ptr)[at] ? x : kNegInf;
  return x + load_as_float(m.ptr, m.dtype, at);
}

// One warp: query i of row b, query head h.
template <class T, class Source>
__device__ void attend_one(const GenericArgs& a, const Source& src, int32_t b, int32_t i,
                           int32_t h, float* q_smem) {
  const int lane = int(threadIdx.x) % kLanes;
  const int32_t num_q = row_length(a.queries, b);
  const int32_t len = src.length(b);
  const int32_t kv_head = h / a.group_size;
  const int64_t token = int64_t(row_start(a.queries, b)) + i;
  const T* q = static_cast<const T*>(a.q.ptr) + int64_t(b) * a.q.stride_batch +
               token * a.q.stride_token + int64_t(h) * a.q.stride_head;
  for (int dim = lane; dim < a.head_dim; dim += kLanes) q_smem[dim] = to_float(q[dim]);
  __syncwarp();

  const int32_t pos = a.bottom_right ? i + len - num_q : i;
  int32_t hi = len, lo = 0;
  if (a.causal) hi = min(len, pos + 1);
  if (a.window_left >= 0) lo = max(0, pos - a.window_left);

  float m = kNegInf, d = 0.0f;
  float o[kMaxDimsPerLane];
#pragma unroll
  for (int k = 0; k < kMaxDimsPerLane; ++k) o[k] = 0.0f;

  for (int32_t j0 = lo; j0 < hi; j0 += kLanes) {
    const int32_t j = j0 + lane;
    float x = kNegInf;
    if (j < hi) {
      const T* key = src.key(b, kv_head, j);
      float dot = 0.0f;
      for (int dim = 0; dim < a.head_dim; ++dim) dot += q_smem[dim] * to_float(key[dim]);
      x = dot * a.scale;
      if (a.logits_soft_cap > 0.0f) x = a.logits_soft_cap * tanhf(x / a.logits_soft_cap);
      x = apply_mask(a.mask, x, b, h, i, j) * kLog2e;
    }
    const float m_new = fmaxf(m, warp_max(x));
    if (m_new == kNegInf) continue;  // nothing visible yet
    const float alpha = softmax_rescale(m, m_new);
    const float p = exp2f(x - m_new);
    d = d * alpha + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int k = 0; k < kMaxDimsPerLane; ++k) o[k] *= alpha;
    const int32_t count = min(kLanes, hi - j0);
    for (int32_t jj = 0; jj < count; ++jj) {
      const float pj = __shfl_sync(kFullMask, p, jj);
      if (pj == 0.0f) continue;  // masked key (uniform across the warp)
      const T* value = src.value(b, kv_head, j0 + jj);
#pragma unroll
      for (int k = 0; k < kMaxDimsPerLane; ++k) {
        const int dim = lane + k * kLanes;
        if (dim < a.head_dim) o[k] += pj * to_float(value[dim]);
      }
    }
  }

  T* out = static_cast<T*>(a.out.ptr) + int64_t(b) * a.out.stride_batch +
           token * a.out.stride_token + int64_t(h) * a.out.stride_head;
  const float inv = d > 0.0f ? 1.0f / d : 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxDimsPerLane; ++k) {
    const int dim = lane + k * kLanes;
    if (dim < a.head_dim) out[dim] = from_float<T>(o[k] * inv);
  }
  if (a.lse != nullptr && lane == 0)
    a.lse[int64_t(b) * a.lse_stride_batch + token * a.lse_stride_token +
          int64_t(h) * a.lse_stride_head] = softmax_lse(m, d);
  __syncwarp();  // q_smem is rewritten by this warp's next query
}

template <class T, class Source>
__global__ void __launch_bounds__(kWarps * kLanes)
    generic_planned_kernel(const __grid_constant__ GenericArgs a, const Source src) {
  __shared__ float q_smem[kWarps][kGenericMaxHeadDim];
  const int warp = int(threadIdx.x) / kLanes;
  const int32_t h = int32_t(blockIdx.y);
  const int num_work = a.work_ints[0];
  const int4* items = reinterpret_cast<const int4*>(a.work_ints + Workspace::Impl::kHeaderInts);
  for (int w = int(blockIdx.x); w < num_work; w += int(gridDim.x)) {
    const int4 item = items[w];  // {row, q_begin, q_end, -1}
    for (int32_t i = item.y + warp; i < item.z; i += kWarps)
      attend_one<T>(a, src, item.x, i, h, q_smem[warp]);
  }
}

template <class T, class Source>
__global__ void __launch_bounds__(kWarps * kLanes)
    generic_token_kernel(const __grid_constant__ GenericArgs a, const Source src) {
  __shared__ float q_smem[kWarps][kGenericMaxHeadDim];
  const int warp = int(threadIdx.x) / kLanes;
  const int64_t n = int64_t(blockIdx.x) * kWarps + warp;
  if (n >= a.num_tokens) return;
  int32_t b, i;
  find_row(a.queries, n, b, i);
  // Rows past indptr[B] are padding (find_row gives them the last row): neither read nor
  // written.
  if (i >= row_length(a.queries, b)) return;
  attend_one<T>(a, src, b, i, int32_t(blockIdx.y), q_smem[warp]);
}

template <class Body>
void by_dtype(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: body(float{}); return;
    case DType::f16: body(__half{}); return;
    case DType::bf16: body(__nv_bfloat16{}); return;
    default: check::fail("attention on CUDA: expected f32, f16 or bf16, got ", dtype_name(dtype));
  }
}

void check_args(const GenericArgs& a) {
  check::require(a.head_dim > 0 && a.head_dim <= kGenericMaxHeadDim,
                 "attention on CUDA: head_dim ", a.head_dim, " above ", kGenericMaxHeadDim);
  check::require(a.num_qo_heads <= 65535, "attention on CUDA: at most 65535 query heads, got ",
                 a.num_qo_heads);
}

}  // namespace

void launch_generic_paged_planned(const GenericArgs& args, const PageTableView& pages,
                                  const void* k_pages, const void* v_pages, int64_t grid_x,
                                  cudaStream_t stream) {
  check_args(args);
  if (grid_x == 0 || args.num_qo_heads == 0) return;
  by_dtype(args.dtype, [&](auto zero) {
    using T = decltype(zero);
    const PagedSource<T> src{pages, static_cast<const T*>(k_pages), static_cast<const T*>(v_pages)};
    generic_planned_kernel<T><<<dim3(unsigned(grid_x), unsigned(args.num_qo_heads)),
                                kWarps * kLanes, 0, stream>>>(args, src);
  });
  FP_CUDA_CHECK_LAUNCH();
}

void launch_generic_paged(const GenericArgs& args, const PageTableView& pages,
                          const void* k_pages, const void* v_pages, cudaStream_t stream) {
  check_args(args);
  if (args.num_tokens == 0 || args.num_qo_heads == 0) return;
  by_dtype(args.dtype, [&](auto zero) {
    using T = decltype(zero);
    const PagedSource<T> src{pages, static_cast<const T*>(k_pages), static_cast<const T*>(v_pages)};
    const unsigned blocks = unsigned((args.num_tokens + kWarps - 1) / kWarps);
    generic_token_kernel<T><<<dim3(blocks, unsigned(args.num_qo_heads)), kWarps * kLanes, 0,
                              stream>>>(args, src);
  });
  FP_CUDA_CHECK_LAUNCH();
}

void launch_generic_strided(const GenericArgs& args, const StridedKv& kv, cudaStream_t stream) {
  check_args(args);
  if (args.num_tokens == 0 || args.num_qo_heads == 0) return;
  by_dtype(args.dtype, [&](auto zero) {
    using T = decltype(zero);
    const StridedSource<T> src{kv};
    const unsigned blocks = unsigned((args.num_tokens + kWarps - 1) / kWarps);
    generic_token_kernel<T><<<dim3(blocks, unsigned(args.num_qo_heads)), kWarps * kLanes, 0,
                              stream>>>(args, src);
  });
  FP_CUDA_CHECK_LAUNCH();
}

}  // namespace flashpage::cuda
