// Host check of the Hopper prefill's layout math (src/cuda/prefill_hopper/smem_layout.h)
// against the PTX ISA's definitions, restated here on their own:
//  - the wgmma matrix descriptor bit fields (start >> 4 at 0-13, LBO >> 4 at 16-29,
//    SBO >> 4 at 32-45, swizzle mode at 62-63, 1 = 128B);
//  - the canonical 128B-swizzle layouts (9.7.15.5.1.2.1.3), K-major
//    ((8,m),(T,2k)):((8T,SBO),(1,T)) and MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), then
//    Swizzle<3,4,3> on the byte address;
//  - the m64nNk16 accumulator and A-register fragments as CuTe writes them
//    (CLayout_64xN = ALayout_64x16 = ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)) over
//    (m + 64 n)).
// For every element each wgmma step reads, the address the hardware derives from the kernel's
// descriptor must be where the kernel's producer stored that element. Pure host code.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "cuda/prefill_hopper/smem_layout.h"

namespace {

namespace hp = flashpage::cuda::prefill_hopper;

struct Desc {
  uint32_t start, lbo, sbo, base_offset, swizzle;
};
Desc decode(uint64_t d) {
  return {uint32_t(d & 0x3FFF) << 4, uint32_t((d >> 16) & 0x3FFF) << 4,
          uint32_t((d >> 32) & 0x3FFF) << 4, uint32_t((d >> 49) & 7), uint32_t(d >> 62)};
}

// Swizzle<3,4,3>: bits [4,7) ^= bits [7,10) of the byte address.
uint32_t swizzle128(uint32_t addr) { return addr ^ (((addr >> 7) & 7u) << 4); }

// Byte address of element (mn, k) of one wgmma operand read through descriptor d, 16-bit
// elements (T = 8), k within the k16 step.
uint32_t k_major_address(const Desc& d, int mn, int k) {
  const uint32_t linear = d.start + uint32_t((mn % 8) * 128 + (mn / 8) * d.sbo + k * 2);
  return swizzle128(linear);
}
uint32_t mn_major_address(const Desc& d, int mn, int k) {
  const uint32_t linear =
      d.start + uint32_t((mn % 64) * 2 + (mn / 64) * d.lbo + (k % 8) * 128 + (k / 8) * d.sbo);
  return swizzle128(linear);
}

// Where the producer stores element (row, col) of a tile of `rows` rows at byte `base`.
uint32_t stored_address(uint32_t base, int row, int col, int rows) {
  return base + hp::tile_chunk_offset(row, col / 8, rows) + uint32_t(col % 8) * 2;
}

template <int kHeadDim>
void check_qk_operands() {
  using Cfg = hp::TileConfig<kHeadDim>;
  const uint32_t q_base = 5 * 1024, k_base = q_base + Cfg::kQBytes;  // 1024-aligned
  for (int wg = 0; wg < 2; ++wg) {
    const uint64_t qd = hp::k_major_desc(q_base + uint32_t(wg * 64 * 128));
    const uint64_t kd = hp::k_major_desc(k_base);
    for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
      const Desc a = decode(qd + (hp::k_major_step_offset(kk, Cfg::kBlockM) >> 4));
      const Desc b = decode(kd + (hp::k_major_step_offset(kk, Cfg::kBlockN) >> 4));
      ASSERT_EQ(a.swizzle, 1u);
      ASSERT_EQ(a.base_offset, 0u);
      ASSERT_EQ(a.sbo, 1024u);
      ASSERT_EQ(b.sbo, 1024u);
      for (int k = 0; k < 16; ++k) {
        for (int m = 0; m < 64; ++m)
          ASSERT_EQ(k_major_address(a, m, k),
                    stored_address(q_base, wg * 64 + m, 16 * kk + k, Cfg::kBlockM))
              << "Q wg " << wg << " kk " << kk << " m " << m << " k " << k;
        for (int n = 0; n < Cfg::kBlockN; ++n)
          ASSERT_EQ(k_major_address(b, n, k), stored_address(k_base, n, 16 * kk + k, Cfg::kBlockN))
              << "K kk " << kk << " n " << n << " k " << k;
      }
    }
  }
}

template <int kHeadDim>
void check_pv_operand() {
  using Cfg = hp::TileConfig<kHeadDim>;
  const uint32_t v_base = 37 * 1024;
  const uint64_t vd = hp::mn_major_desc(v_base, Cfg::kBlockN);
  for (int ks = 0; ks < Cfg::kPvSteps; ++ks) {
    const Desc b = decode(vd + (hp::mn_major_step_offset(ks) >> 4));
    ASSERT_EQ(b.swizzle, 1u);
    ASSERT_EQ(b.base_offset, 0u);
    ASSERT_EQ(b.start % 1024, 0u) << "MN-major steps keep the pattern 1024-aligned";
    for (int k = 0; k < 16; ++k)       // key within the step
      for (int n = 0; n < kHeadDim; ++n)  // head_dim column
        ASSERT_EQ(mn_major_address(b, n, k), stored_address(v_base, 16 * ks + k, n, Cfg::kBlockN))
            << "V ks " << ks << " key " << k << " dim " << n;
  }
}

TEST(PrefillHopperLayout, DescriptorsReadWhatTheProducerStored) {
  check_qk_operands<64>();
  check_qk_operands<128>();
  check_qk_operands<256>();
  check_pv_operand<64>();
  check_pv_operand<128>();
  check_pv_operand<256>();
}

TEST(PrefillHopperLayout, StoredLayoutIsTheHardwareSwizzle) {
  // The producer's XOR equals Swizzle<3,4,3> of the unswizzled (row-major per 64-col block)
  // address, because tiles start on 1024-byte boundaries; and it is a bijection.
  constexpr int kRows = 128, kChunks = 16;
  std::set<uint32_t> seen;
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t linear = uint32_t((c / 8) * kRows * 128 + r * 128 + (c % 8) * 16);
      const uint32_t off = hp::tile_chunk_offset(r, c, kRows);
      EXPECT_EQ(off, swizzle128(linear));
      EXPECT_TRUE(seen.insert(off).second);
    }
}

TEST(PrefillHopperLayout, AccumulatorAndARegisterFragments) {
  // CuTe's CLayout_64xN (thread t, value v) -> offset m + 64 n.
  auto c_layout = [](int t, int v, int& m, int& n) {
    const int off = 128 * (t % 4) + 1 * ((t / 4) % 8) + 16 * (t / 32) + 64 * (v % 2) +
                    8 * ((v / 2) % 2) + 512 * (v / 4);
    m = off % 64;
    n = off / 64;
  };
  for (int t = 0; t < 128; ++t)
    for (int v = 0; v < 128 / 2; ++v) {  // N = 128: 64 values
      int m, n;
      c_layout(t, v, m, n);
      EXPECT_EQ(hp::wg_acc_row(t, v % 4), m) << "t " << t << " v " << v;
      EXPECT_EQ(hp::wg_acc_col(t, v / 4, v % 4), n) << "t " << t << " v " << v;
    }
  // ALayout_64x16 is the same function over (m, k) of one k16 step. Register r holds values
  // 2r, 2r+1; the kernel fills it from S accumulators d[2s + r/2][2(r%2) + h] (pack_p), which
  // must be element (m, 16s + k) of S for the (m, k) the A layout gives.
  for (int t = 0; t < 128; ++t)
    for (int s = 0; s < 8; ++s)
      for (int r = 0; r < 4; ++r)
        for (int h = 0; h < 2; ++h) {
          int m, k;
          c_layout(t, 2 * r + h, m, k);
          const int j = 2 * s + r / 2, e = 2 * (r % 2) + h;
          EXPECT_EQ(hp::wg_acc_row(t, e), m);
          EXPECT_EQ(hp::wg_acc_col(t, j, e), 16 * s + k);
        }
}

TEST(PrefillHopperLayout, SharedMemoryPlanFits) {
  using C128 = hp::TileConfig<128>;
  using C64 = hp::TileConfig<64>;
  using C256 = hp::TileConfig<256>;
  EXPECT_EQ(C128::kKOffset % 1024, 0);
  EXPECT_EQ(C128::kVOffset % 1024, 0);
  EXPECT_LE(C128::kSmemLaunchBytes, 227 * 1024);
  EXPECT_LE(C64::kSmemLaunchBytes, 227 * 1024);
  EXPECT_LE(C256::kSmemLaunchBytes, 227 * 1024);
  EXPECT_EQ(C256::kVOffset % 1024, 0);
  // The epilogue stages the 128 x head_dim output in the tile's Q stage.
  EXPECT_EQ(C256::kQBytes, C256::kBlockM * 256 * 2);
  EXPECT_EQ(C128::kQBytes, C128::kBlockM * 128 * 2);
  EXPECT_EQ(C128::kQStages, 2);
  // LBO of V fits the 14-bit field.
  EXPECT_LT(hp::desc_encode(C128::kBlockN * 128), (1u << 14));
}

}  // namespace
