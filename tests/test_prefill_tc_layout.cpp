// Host check of the tensor-core prefill's index math (src/cuda/prefill_tc/fragment_layout.h)
// against the PTX definitions of ldmatrix and mma.m16n8k16, which this file restates on its
// own: tiles are written to a simulated shared memory in the kernel's swizzled layout, read
// back through the kernel's ldmatrix addresses, and multiplied fragment by fragment; the
// results must equal plain matrix products. Also checks that every ldmatrix phase is free of
// shared-memory bank conflicts. Pure host code: runs everywhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "cuda/prefill_tc/fragment_layout.h"

namespace {

using flashpage::cuda::prefill_tc::a_operand_row;
using flashpage::cuda::prefill_tc::acc_col;
using flashpage::cuda::prefill_tc::acc_row;
using flashpage::cuda::prefill_tc::b_operand_row;
using flashpage::cuda::prefill_tc::LdmatrixRow;
using flashpage::cuda::prefill_tc::swizzled_offset;
using flashpage::cuda::prefill_tc::SwizzledPairs;

// A tile of `rows` x `dim` 16-bit integers in the kernel's swizzled byte layout.
struct SmemTile {
  int dim;
  std::vector<uint8_t> bytes;
  SmemTile(const std::vector<int16_t>& m, int rows, int dim_) : dim(dim_) {
    bytes.assign(size_t(rows) * dim * 2, 0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < dim; ++c) {
        const uint32_t off = swizzled_offset(r, c / 8, dim * 2) + (c % 8) * 2;
        std::memcpy(&bytes[off], &m[size_t(r) * dim + c], 2);
      }
  }
  int16_t at_byte(uint32_t off) const {
    int16_t v;
    std::memcpy(&v, &bytes[off], 2);
    return v;
  }
};

// A 32-bit register of two 16-bit values (lo = first).
struct Pair {
  int32_t lo = 0, hi = 0;
};

// PTX ldmatrix.m8n8.x4(.trans): addr[lane] is the row address lane gives; returns the four
// registers of every lane.
void ldmatrix_x4(const SmemTile& t, const uint32_t (&addr)[32], bool trans, Pair (&out)[32][4]) {
  for (int i = 0; i < 4; ++i) {
    int16_t m[8][8];  // matrix i: row k at addr[8i + k]
    for (int k = 0; k < 8; ++k)
      for (int c = 0; c < 8; ++c) m[k][c] = t.at_byte(addr[8 * i + k] + 2 * c);
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, q = lane % 4;
      out[lane][i] =
          trans ? Pair{m[2 * q][g], m[2 * q + 1][g]} : Pair{m[g][2 * q], m[g][2 * q + 1]};
    }
  }
}

// PTX mma.m16n8k16.row.col: C[16x8] += A[16x16] . B[16x8] from the per-lane fragments.
void mma_16816(int64_t (&c)[32][4], const Pair (&a)[32][4], const Pair (&b0b1)[32][2]) {
  int64_t am[16][16], bm[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    for (int r = 0; r < 4; ++r) {  // a0: (g, 2q), a1: (g+8, 2q), a2: (g, 2q+8), a3: (g+8, 2q+8)
      const int row = g + (r & 1) * 8, col = 2 * q + (r >> 1) * 8;
      am[row][col] = a[lane][r].lo;
      am[row][col + 1] = a[lane][r].hi;
    }
    for (int r = 0; r < 2; ++r) {  // b0: (k 2q, n g), b1: (k 2q+8, n g)
      bm[2 * q + 8 * r][g] = b0b1[lane][r].lo;
      bm[2 * q + 8 * r + 1][g] = b0b1[lane][r].hi;
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, q = lane % 4;
    for (int e = 0; e < 4; ++e) {  // c0,c1: (g, 2q..), c2,c3: (g+8, 2q..)
      const int row = g + (e >> 1) * 8, col = 2 * q + (e & 1);
      for (int k = 0; k < 16; ++k) c[lane][e] += am[row][k] * bm[k][col];
    }
  }
}

// Every 8-address phase of an ldmatrix must hit 8 distinct 16-byte bank groups.
void expect_conflict_free(const uint32_t (&addr)[32]) {
  for (int phase = 0; phase < 4; ++phase) {
    std::set<uint32_t> groups;
    for (int k = 0; k < 8; ++k) groups.insert((addr[8 * phase + k] / 16) % 8);
    EXPECT_EQ(groups.size(), 8u) << "phase " << phase;
  }
}

std::vector<int16_t> random_matrix(std::mt19937& rng, int rows, int cols) {
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<int16_t> m(size_t(rows) * cols);
  for (auto& x : m) x = int16_t(dist(rng));
  return m;
}

class FragmentLayout : public ::testing::TestWithParam<int> {};

// S = Q.K^T for a warp's 16 rows, as the kernel's qk_step reads Q and K.
TEST_P(FragmentLayout, QueryKeyProductMatchesMatmul) {
  const int dim = GetParam(), rows = 64, keys = 64, row_bytes = dim * 2;
  std::mt19937 rng(1234 + dim);
  const auto q = random_matrix(rng, rows, dim), k = random_matrix(rng, keys, dim);
  const SmemTile qs(q, rows, dim), ks(k, keys, dim);
  for (int warp_row0 = 0; warp_row0 < rows; warp_row0 += 16) {
    int64_t s[8][32][4] = {};
    for (int kk = 0; kk < dim / 16; ++kk) {
      uint32_t qa[32], ka[4][32];
      for (int lane = 0; lane < 32; ++lane) {
        const LdmatrixRow a = a_operand_row(lane, 0, 0), b = b_operand_row(lane, 0, 0);
        SwizzledPairs ap, bp;
        ap.init(a.row, a.chunk, row_bytes);
        bp.init(b.row, b.chunk, row_bytes);
        qa[lane] = uint32_t(warp_row0 * row_bytes) + ap.at(kk, 0, row_bytes);
        // The pattern form must agree with the direct row/chunk formula.
        const LdmatrixRow direct = a_operand_row(lane, warp_row0, kk);
        EXPECT_EQ(qa[lane], swizzled_offset(direct.row, direct.chunk, row_bytes));
        for (int np = 0; np < keys / 16; ++np) {
          ka[np][lane] = bp.at(kk, np * 16, row_bytes);
          const LdmatrixRow d = b_operand_row(lane, np * 16, kk);
          EXPECT_EQ(ka[np][lane], swizzled_offset(d.row, d.chunk, row_bytes));
        }
      }
      expect_conflict_free(qa);
      Pair af[32][4];
      ldmatrix_x4(qs, qa, false, af);
      for (int np = 0; np < keys / 16; ++np) {
        expect_conflict_free(ka[np]);
        Pair bf[32][4];
        ldmatrix_x4(ks, ka[np], false, bf);
        Pair b_lo[32][2], b_hi[32][2];
        for (int lane = 0; lane < 32; ++lane) {
          b_lo[lane][0] = bf[lane][0], b_lo[lane][1] = bf[lane][1];
          b_hi[lane][0] = bf[lane][2], b_hi[lane][1] = bf[lane][3];
        }
        mma_16816(s[2 * np], af, b_lo);
        mma_16816(s[2 * np + 1], af, b_hi);
      }
    }
    for (int nt = 0; nt < 8; ++nt)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int row = warp_row0 + acc_row(lane, e), key = nt * 8 + acc_col(lane, e);
          int64_t want = 0;
          for (int c = 0; c < dim; ++c)
            want += int64_t(q[size_t(row) * dim + c]) * k[size_t(key) * dim + c];
          ASSERT_EQ(s[nt][lane][e], want) << "row " << row << " key " << key;
        }
  }
}

// O = P.V with P taken from S's accumulator layout (pack_p) and V read transposed (pv).
TEST_P(FragmentLayout, ProbabilityValueProductMatchesMatmul) {
  const int dim = GetParam(), keys = 64, row_bytes = dim * 2;
  std::mt19937 rng(99 + dim);
  const auto p = random_matrix(rng, 16, keys), v = random_matrix(rng, keys, dim);
  const SmemTile vs(v, keys, dim);
  // P in the C layout of 8 key tiles, as the softmax leaves it.
  int32_t s[8][32][4];
  for (int nt = 0; nt < 8; ++nt)
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e)
        s[nt][lane][e] = p[size_t(acc_row(lane, e)) * keys + nt * 8 + acc_col(lane, e)];
  std::vector<int64_t> o(size_t(dim / 8) * 32 * 4, 0);
  for (int ks = 0; ks < keys / 16; ++ks) {
    Pair pf[32][4];  // pack_p
    for (int lane = 0; lane < 32; ++lane) {
      pf[lane][0] = {s[2 * ks][lane][0], s[2 * ks][lane][1]};
      pf[lane][1] = {s[2 * ks][lane][2], s[2 * ks][lane][3]};
      pf[lane][2] = {s[2 * ks + 1][lane][0], s[2 * ks + 1][lane][1]};
      pf[lane][3] = {s[2 * ks + 1][lane][2], s[2 * ks + 1][lane][3]};
    }
    for (int dp = 0; dp < dim / 16; ++dp) {
      uint32_t va[32];
      for (int lane = 0; lane < 32; ++lane) {
        const LdmatrixRow a = a_operand_row(lane, 0, 0);
        SwizzledPairs ap;
        ap.init(a.row, a.chunk, row_bytes);
        va[lane] = ap.at(dp, ks * 16, row_bytes);
        const LdmatrixRow d =
            flashpage::cuda::prefill_tc::b_trans_operand_row(lane, ks * 16, dp * 16);
        EXPECT_EQ(va[lane], swizzled_offset(d.row, d.chunk, row_bytes));
      }
      expect_conflict_free(va);
      Pair bf[32][4];
      ldmatrix_x4(vs, va, true, bf);
      for (int half = 0; half < 2; ++half) {
        Pair b[32][2];
        for (int lane = 0; lane < 32; ++lane)
          b[lane][0] = bf[lane][2 * half], b[lane][1] = bf[lane][2 * half + 1];
        int64_t c[32][4];
        const int dt = 2 * dp + half;
        for (int lane = 0; lane < 32; ++lane)
          for (int e = 0; e < 4; ++e) c[lane][e] = o[(size_t(dt) * 32 + lane) * 4 + e];
        mma_16816(c, pf, b);
        for (int lane = 0; lane < 32; ++lane)
          for (int e = 0; e < 4; ++e) o[(size_t(dt) * 32 + lane) * 4 + e] = c[lane][e];
      }
    }
  }
  for (int dt = 0; dt < dim / 8; ++dt)
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) {
        const int row = acc_row(lane, e), col = dt * 8 + acc_col(lane, e);
        int64_t want = 0;
        for (int t = 0; t < keys; ++t)
          want += int64_t(p[size_t(row) * keys + t]) * v[size_t(t) * dim + col];
        ASSERT_EQ(o[(size_t(dt) * 32 + lane) * 4 + e], want) << "row " << row << " dim " << col;
      }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, FragmentLayout, ::testing::Values(64, 128, 256));

// The epilogue writes lane pairs at chunk dt + 4 bytes per lane % 4: the same place the
// swizzled layout gives column dt * 8 + 2 * (lane % 4), and conflict-free per 8 rows.
TEST(FragmentLayoutEpilogue, StagingMatchesLayout) {
  for (int dim : {64, 128, 256}) {
    const int row_bytes = dim * 2;
    for (int dt = 0; dt < dim / 8; ++dt) {
      std::set<uint32_t> banks;
      for (int lane = 0; lane < 32; ++lane) {
        const int row = acc_row(lane, 0), col = dt * 8 + acc_col(lane, 0);
        const uint32_t off = swizzled_offset(row, dt, row_bytes) + (lane & 3) * 4;
        EXPECT_EQ(off, swizzled_offset(row, col / 8, row_bytes) + (col % 8) * 2);
        banks.insert((off / 4) % 32);
      }
      EXPECT_EQ(banks.size(), 32u) << "dim " << dim << " dt " << dt;
    }
  }
}

}  // namespace
