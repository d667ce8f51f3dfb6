#pragma once
// How many math warpgroups the Hopper prefill runs a call on (smem_layout.h): three, with
// 192-row M tiles, at head_dim 64 without causal masking or a window; two everywhere else.
//
// At head_dim 64 a warpgroup's softmax takes as long as its GEMMs, so with two warpgroups the
// softmaxes overlap each other and the tensor cores idle; a third fills the gaps
// (FlashAttention-3's 192 x 128 tiles). Measured (bench/NOTES.md, session 33, H100, 32/32/64,
// three against two, non-causal): 1 x 8192 +9-14% (ragged, contiguous and paged 16); with a
// range's last, partial tile run by the warpgroups that have rows in it (the others idle,
// consumer_mainloop.cuh), 8 x 2048 +7-8%, 64 x 512 +2-5%, 16 x 1024 level. Causal: 5-19%
// slower in call 1 (a 192-row diagonal tile computes up to 192 masked keys of a row where
// 128-row tiles compute up to 128); with each warpgroup skipping the K/V tiles its rows do
// not see (call 4), 1 x 8192 and 8 x 2048 0-3% faster but 16 x 1024 5-11% and 64 x 512
// 21-23% slower. So causal calls and windows (the same diagonal bands) stay on two. A paged call on three leaves its work list, whose
// 64-token items would pair into 128-token ranges (35-50% slower), and has the kernel cut
// its rows into 192-token ranges as for ragged queries (prefill_hopper.cu).
//
// Plain host C++: tests/test_prefill_warpgroup_choice.cpp.
#include "cuda/prefill_hopper/smem_layout.h"

namespace flashpage::cuda::prefill_hopper {

struct WarpgroupCall {
  int head_dim = 128;
  bool causal = false;
  bool window = false;  // window_left >= 0
};

inline int choose_math_warpgroups(const WarpgroupCall& c) {
  return c.head_dim == 64 && !c.causal && !c.window ? 3 : 2;
}

}  // namespace flashpage::cuda::prefill_hopper
