#pragma once
// Online softmax on the S fragments of one warp (FA2): each thread holds two rows (lane/4
// and lane/4 + 8), each row spread over the 4 lanes of a quad. The running max m is
// log2-domain and quad-uniform; the denominator d is kept per thread (a partial sum over the
// thread's columns) and reduced over the quad once, in the epilogue. Empty rows keep m = -inf
// and d = 0 without NaN (softmax_rescale / softmax_safe_max of softmax_state.cuh).
#include "cuda/softmax_state.cuh"

namespace flashpage::cuda::prefill_tc {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));  // ex2(-inf) = +0
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kKeyTiles, int kDimTiles>
struct WarpSoftmax {
  float m[2], d[2];

  __device__ __forceinline__ void init() {
    m[0] = m[1] = kNegInf;
    d[0] = d[1] = 0.0f;
  }

  // Folds one tile of logits in. s holds logits times 1/mul in log2 units (mul = scale*log2e
  // for raw dot products, 1 for transformed logits; mul > 0); on return s holds the
  // unnormalised probabilities, and o has been rescaled to the new max.
  __device__ __forceinline__ void update(float (&s)[kKeyTiles][4], float mul,
                                         float (&o)[kDimTiles][4]) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float tile_max = kNegInf;
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt)
        tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * k], s[nt][2 * k + 1]));
      const float m_new = fmaxf(m[k], quad_max(tile_max) * mul);
      const float rescale = softmax_rescale(m[k], m_new);
      const float shift = -softmax_safe_max(m_new);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        s[nt][2 * k] = fast_exp2(fmaf(s[nt][2 * k], mul, shift));
        s[nt][2 * k + 1] = fast_exp2(fmaf(s[nt][2 * k + 1], mul, shift));
        sum += s[nt][2 * k] + s[nt][2 * k + 1];
      }
      d[k] = d[k] * rescale + sum;
#pragma unroll
      for (int dt = 0; dt < kDimTiles; ++dt) {
        o[dt][2 * k] *= rescale;
        o[dt][2 * k + 1] *= rescale;
      }
      m[k] = m_new;
    }
  }
};

}  // namespace flashpage::cuda::prefill_tc
