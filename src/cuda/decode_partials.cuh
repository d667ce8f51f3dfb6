#pragma once
// Merging a split decode row's partial results: the fold of normalised partial outputs with
// their LSEs, and the write of one merged (row, query head, 4 dims) output quad. The split
// merge kernel (decode.cu) and the streamed kernel's own merge of rows of a few pieces
// (decode_stream_kernel.cuh) both use these.
#include <cstdint>

#include "cuda/decode_args.h"
#include "cuda/device_types.cuh"
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda {

// Partial slots one thread loads at once (16-byte loads in flight).
constexpr int kMergeUnroll = 4;

// Running merge of normalised partials o_s with natural-log weights lse_s:
// out = sum_s exp(lse_s - L) o_s, L = logsumexp_s lse_s, kept as (max m, sum d, acc) so two
// folds of disjoint slot sets combine exactly (the SoftmaxState rule for many states).
struct PartialFold {
  float m = kNegInf, d = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  __device__ __forceinline__ void add(float m2, float d2, float4 acc2) {
    const float m_new = fmaxf(m, m2);
    if (m_new == kNegInf) return;  // both empty (slots that saw no key)
    const float a = m == kNegInf ? 0.0f : __expf(m - m_new);
    const float b = m2 == kNegInf ? 0.0f : __expf(m2 - m_new);
    d = d * a + d2 * b;
    acc.x = acc.x * a + acc2.x * b;
    acc.y = acc.y * a + acc2.y * b;
    acc.z = acc.z * a + acc2.z * b;
    acc.w = acc.w * a + acc2.w * b;
    m = m_new;
  }

  // Combines the folds of `group_lanes` adjacent lanes (a power of two <= 32); every lane of
  // the warp must call it.
  __device__ __forceinline__ void combine_lanes(int group_lanes) {
    for (int offset = 1; offset < group_lanes; offset <<= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
      const float d2 = __shfl_xor_sync(0xffffffffu, d, offset);
      float4 acc2;
      acc2.x = __shfl_xor_sync(0xffffffffu, acc.x, offset);
      acc2.y = __shfl_xor_sync(0xffffffffu, acc.y, offset);
      acc2.z = __shfl_xor_sync(0xffffffffu, acc.z, offset);
      acc2.w = __shfl_xor_sync(0xffffffffu, acc.w, offset);
      add(m2, d2, acc2);
    }
  }
};

// The partials of one step: outputs [num_partials, Hq, D] then LSEs [num_partials, Hq].
// Loads go through L2 only (ld.global.cg): in the streamed kernel other SMs wrote the slots
// during the same launch, so a line in this SM's L1 could be stale.
struct DecodePartials {
  const float* out;
  const float* lse;
  int num_qo_heads, head_dim;

  __device__ __forceinline__ DecodePartials(const DecodeArgs& a, int head_dim_)
      : out(a.partial_out), num_qo_heads(a.num_qo_heads), head_dim(head_dim_) {
    lse = a.partial_out + int64_t(a.work_ints[1]) * a.num_qo_heads * head_dim;
  }

  // Folds slots s, s + step, ... below s1 of (head, dims dim .. dim + 3).
  __device__ __forceinline__ PartialFold fold(int head, int dim, int s, int s1, int step) const {
    auto lse_of = [&](int slot) { return __ldcg(lse + int64_t(slot) * num_qo_heads + head); };
    auto quad_of = [&](int slot) {
      return __ldcg(reinterpret_cast<const float4*>(
          out + (int64_t(slot) * num_qo_heads + head) * head_dim + dim));
    };
    PartialFold f;
    for (; s + (kMergeUnroll - 1) * step < s1; s += kMergeUnroll * step) {
      float w[kMergeUnroll];
      float4 o[kMergeUnroll];
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {
        w[u] = lse_of(s + u * step);
        o[u] = quad_of(s + u * step);
      }
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) f.add(w[u], 1.0f, o[u]);
    }
    for (; s < s1; s += step) f.add(lse_of(s), 1.0f, quad_of(s));
    return f;
  }
};

// Lanes per output quad so that each folds at most ~kMergeUnroll slots of a `slots`-slot row.
__host__ __device__ __forceinline__ int merge_group_lanes(int slots) {
  int lanes = 1;
  while (lanes < 32 && lanes * kMergeUnroll < slots) lanes *= 2;
  return lanes;
}

// Writes a merged quad of (row, head) to the output, and the row's LSE with the quad at dim 0.
template <class T>
__device__ __forceinline__ void store_merged(const DecodeArgs& a, const PartialFold& fold, int row,
                                             int head, int dim) {
  const float inv = fold.d > 0.0f ? 1.0f / fold.d : 0.0f;
  T* out = static_cast<T*>(a.out) + int64_t(row) * a.out_stride_batch +
           int64_t(head) * a.out_stride_head + dim;
  out[0] = from_float<T>(fold.acc.x * inv);
  out[1] = from_float<T>(fold.acc.y * inv);
  out[2] = from_float<T>(fold.acc.z * inv);
  out[3] = from_float<T>(fold.acc.w * inv);
  if (a.lse != nullptr && dim == 0)
    a.lse[int64_t(row) * a.lse_stride_batch + int64_t(head) * a.lse_stride_head] =
        fold.d > 0.0f ? fold.m + __logf(fold.d) : kNegInf;
}

}  // namespace flashpage::cuda
