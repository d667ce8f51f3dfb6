#pragma once
// Facts about the CUDA decode block that the host planner needs (how many blocks fit on an
// SM), kept free of CUDA headers. src/cuda/decode_args.h checks its tile against these at
// compile time, so the planner and the kernel cannot disagree.
#include <algorithm>

namespace flashpage {

struct DecodeTiling {
  static constexpr int kHeadsPerBlock = 16;  // the M of one m16n8k16 MMA
  static constexpr int kTileTokens = 32;     // K/V tokens per pipeline stage
  static constexpr int kElemBytes = 2;       // bf16 / f16 pages
  static constexpr int kRowPadBytes = 16;    // shifts rows by 4 banks for ldmatrix
  static constexpr int kSmemPerSm = 228 * 1024;    // Hopper
  static constexpr int kReservedPerBlock = 1024;   // the driver's per-block shared reserve

  static constexpr int stages(int head_dim) {
    return head_dim <= 64 ? 6 : head_dim <= 128 ? 4 : 3;  // ~48-64 KB of K/V in flight
  }
  static constexpr int row_bytes(int head_dim) { return head_dim * kElemBytes + kRowPadBytes; }
  static constexpr int smem_bytes(int head_dim) {
    return kHeadsPerBlock * row_bytes(head_dim) +
           stages(head_dim) * 2 * kTileTokens * row_bytes(head_dim);
  }
  static constexpr int blocks_per_sm(int head_dim) {
    return std::max(1, kSmemPerSm / (smem_bytes(head_dim) + kReservedPerBlock));
  }
};

}  // namespace flashpage
