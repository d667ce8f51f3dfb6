#pragma once
// Warp-level tensor-core steps of the mainloop on m16n8k16 fragments:
//   S[16 x kBlockN]  = Q[16 x D] . K^T        (A = Q rows, B = K rows via ldmatrix)
//   O[16 x D]       += P[16 x kBlockN] . V     (A = P from S's registers, B = V via ldmatrix.trans)
// The C fragment of S has exactly the A-fragment layout of P (FA2's register reuse), so P
// never goes through shared memory.
#include <cstdint>

#include "cuda/prefill_tc/fragment_layout.h"
#include "cuda/ptx.cuh"

namespace flashpage::cuda::prefill_tc {

// This lane's ldmatrix offsets: the A pattern (Q rows; also V read transposed, which walks
// rows and chunks the same way) and the B pattern (K rows).
template <class Cfg>
struct FragmentOffsets {
  SwizzledPairs a_pattern, b_pattern;

  __device__ __forceinline__ void init(int lane) {
    const LdmatrixRow a = a_operand_row(lane, 0, 0);
    const LdmatrixRow b = b_operand_row(lane, 0, 0);
    a_pattern.init(a.row, a.chunk, Cfg::kRowBytes);
    b_pattern.init(b.row, b.chunk, Cfg::kRowBytes);
  }
};

// Q fragments of the warp's 16 rows (q_rows = address of the warp's first Q row), all k steps.
template <class Cfg>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qf)[Cfg::kKSteps][4], uint32_t q_rows,
                                                 const FragmentOffsets<Cfg>& f) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kKSteps; ++kk)
    ptx::ldmatrix_x4(qf[kk], q_rows + f.a_pattern.at(kk, 0, Cfg::kRowBytes));
}

// One k step of S += Q_kk . K_kk^T over all key tiles.
template <class T, class Cfg>
__device__ __forceinline__ void qk_step(float (&s)[Cfg::kKeyTiles][4], const uint32_t (&a)[4],
                                        uint32_t k_base, int kk, const FragmentOffsets<Cfg>& f) {
#pragma unroll
  for (int np = 0; np < Cfg::kKeyTiles / 2; ++np) {
    uint32_t b[4];
    ptx::ldmatrix_x4(b, k_base + f.b_pattern.at(kk, np * 16, Cfg::kRowBytes));
    ptx::mma_16816<T>(s[2 * np], a, b[0], b[1]);
    ptx::mma_16816<T>(s[2 * np + 1], a, b[2], b[3]);
  }
}

// S = Q . K^T with Q fragments in registers.
template <class T, class Cfg>
__device__ __forceinline__ void qk_from_regs(float (&s)[Cfg::kKeyTiles][4],
                                             const uint32_t (&qf)[Cfg::kKSteps][4],
                                             uint32_t k_base, const FragmentOffsets<Cfg>& f) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kKSteps; ++kk) qk_step<T, Cfg>(s, qf[kk], k_base, kk, f);
}

// S = Q . K^T reading each Q fragment from shared memory just before its k step.
template <class T, class Cfg>
__device__ __forceinline__ void qk_from_smem(float (&s)[Cfg::kKeyTiles][4], uint32_t q_rows,
                                             uint32_t k_base, const FragmentOffsets<Cfg>& f) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
    uint32_t a[4];
    ptx::ldmatrix_x4(a, q_rows + f.a_pattern.at(kk, 0, Cfg::kRowBytes));
    qk_step<T, Cfg>(s, a, k_base, kk, f);
  }
}

// P (f32 probabilities in S's C layout) -> A fragments of T, one per 16 keys:
// a0 = (row g, keys 2t..), a1 = (row g+8, keys 2t..), a2/a3 = the same 8 keys further.
template <class T, class Cfg>
__device__ __forceinline__ void pack_p(uint32_t (&pf)[Cfg::kKeySteps][4],
                                       const float (&s)[Cfg::kKeyTiles][4]) {
#pragma unroll
  for (int ks = 0; ks < Cfg::kKeySteps; ++ks) {
    pf[ks][0] = ptx::pack2<T>(s[2 * ks][0], s[2 * ks][1]);
    pf[ks][1] = ptx::pack2<T>(s[2 * ks][2], s[2 * ks][3]);
    pf[ks][2] = ptx::pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]);
    pf[ks][3] = ptx::pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3]);
  }
}

// O += P . V (V read transposed: key = k, dim = n).
template <class T, class Cfg>
__device__ __forceinline__ void pv(float (&o)[Cfg::kDimTiles][4],
                                   const uint32_t (&pf)[Cfg::kKeySteps][4], uint32_t v_base,
                                   const FragmentOffsets<Cfg>& f) {
#pragma unroll
  for (int ks = 0; ks < Cfg::kKeySteps; ++ks) {
#pragma unroll
    for (int dp = 0; dp < Cfg::kDimTiles / 2; ++dp) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, v_base + f.a_pattern.at(dp, ks * 16, Cfg::kRowBytes));
      ptx::mma_16816<T>(o[2 * dp], pf[ks], b[0], b[1]);
      ptx::mma_16816<T>(o[2 * dp + 1], pf[ks], b[2], b[3]);
    }
  }
}

}  // namespace flashpage::cuda::prefill_tc
