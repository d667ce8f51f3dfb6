// The Hopper (wgmma) prefill against the float64 oracle over the configurations it covers:
// sizes that are not multiples of its 128-row / 128-key tiles (S = 1, 7, 113, 128, 129, 300),
// L > S (a cached prefix), empty rows, bf16 and f16, head_dim 64, 128 and 256 (64-key K/V
// tiles), causal top-left (sdpa) and bottom-right (ragged, paged), GQA 4 and MHA, contiguous
// K/V and pages of 1, 16 and 64 tokens in NHD and HND, window and soft cap, LSE. Outputs are
// poisoned first, so every element must be written. Row maxima that jump between K/V tiles
// check the softmax's held-max rescale. Each case prints the kernel that ran; on a
// compute capability 9.0 device (with FLASHPAGE_PREFILL_KERNEL unset) it must be the Hopper
// kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>

#include "cuda/prefill_hopper/kv_tma.h"
#include "cuda/prefill_hopper/prefill_hopper.h"
#include "cuda/prefill_select.h"
#include "test_util.h"

namespace fpt {
namespace {

// Whether the Hopper kernel should take covered calls here.
bool hopper_expected() {
#if defined(FLASHPAGE_HAVE_SM90A)
  const char* forced = std::getenv("FLASHPAGE_PREFILL_KERNEL");
  if (forced != nullptr && std::strcmp(forced, "tc") == 0) return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

// kMathWarpgroups: 0, or the Hopper kernel's math warpgroups the call should have run on
// (src/cuda/prefill_hopper/warpgroup_choice.h: 3 for head_dim 64 non-causal calls whose rows
// pad little in 192-token ranges).
void expect_kernel(const std::string& what, int math_warpgroups = 0) {
  const char* ran = flashpage::cuda::last_prefill_kernel();
  std::printf("[ kernel ] %-7s %s\n", ran, what.c_str());
  if (hopper_expected() && math_warpgroups > 0) {
    EXPECT_EQ(flashpage::cuda::prefill_hopper_last_math_warpgroups(), math_warpgroups) << what;
  }
  if (hopper_expected()) {
    // "hopper_pairs": the same kernel on clusters of two blocks (FLASHPAGE_PREFILL_CLUSTER
    // builds, CudaClusterPairsRunWhereBuilt).
    EXPECT_TRUE(std::strcmp(ran, "hopper") == 0 || std::strcmp(ran, "hopper_pairs") == 0)
        << what << ": ran " << ran;
  }
}

// ---- sdpa: contiguous [B, H, S, D], top-left causal --------------------------------------

struct SdpaCase {
  int64_t B, Hq, Hkv, S, L, D;
  DType dtype;
  bool causal;
  int window_left = -1;
  float soft_cap = 0;
  int math_warpgroups = 0;  // expect_kernel
  std::string str() const {
    std::ostringstream os;
    os << "sdpa B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " S=" << S << " L=" << L
       << " D=" << D << " " << dtype_name(dtype) << " causal=" << causal
       << " window=" << window_left << " cap=" << soft_cap;
    return os.str();
  }
};

void run_sdpa(Rng& rng, const SdpaCase& c) {
  SCOPED_TRACE(c.str());
  const Device dev = cuda0();
  const Tensor q = random_tensor(rng, {c.B, c.Hq, c.S, c.D}, c.dtype, dev, -2, 2);
  const Tensor k = random_tensor(rng, {c.B, c.Hkv, c.L, c.D}, c.dtype, dev, -2, 2);
  const Tensor v = random_tensor(rng, {c.B, c.Hkv, c.L, c.D}, c.dtype, dev);
  const AttentionParams p{0.0f, c.causal, c.window_left, c.soft_cap};
  const oracle::Result ref = oracle::sdpa(q, k, v, Tensor(), p);
  Tensor out = poisoned({c.B, c.Hq, c.S, c.D}, c.dtype, dev);
  Tensor lse = poisoned({c.B, c.Hq, c.S}, DType::f32, dev);
  sdpa(q, k, v, Tensor(), p, out, lse);
  expect_kernel(c.str(), c.math_warpgroups);
  expect_output(out, ref.out, c.dtype);
  expect_lse(lse, ref.lse, c.dtype);
}

TEST(PrefillHopper, CudaSdpaSizes) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256})
      for (int64_t s : {1, 7, 113, 128, 129, 300})
        for (bool causal : {false, true}) {
          FP_CASE(run_sdpa(rng, {1, 8, 2, s, s, d, t, causal}));        // GQA 4, S == L
          FP_CASE(run_sdpa(rng, {2, 2, 2, s, s + 77, d, t, causal}));   // MHA, L > S
        }
}

TEST(PrefillHopper, CudaSdpaLongAndShortKeys) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16}) {
    FP_CASE(run_sdpa(rng, {1, 4, 1, 64, 700, 128, t, false}));   // many K/V tiles, MQA
    FP_CASE(run_sdpa(rng, {1, 4, 4, 300, 5, 128, t, true}));     // L < S: rows that see nothing
    FP_CASE(run_sdpa(rng, {1, 4, 2, 257, 257, 64, t, true, 40}));        // window
    FP_CASE(run_sdpa(rng, {1, 4, 2, 200, 330, 128, t, false, -1, 20.0f}));  // soft cap
    FP_CASE(run_sdpa(rng, {1, 4, 1, 64, 700, 256, t, false}));   // head_dim 256: 11 K/V tiles
    FP_CASE(run_sdpa(rng, {1, 4, 2, 257, 257, 256, t, true, 40}));       // window over 64-key tiles
    FP_CASE(run_sdpa(rng, {1, 4, 2, 200, 330, 256, t, false, -1, 20.0f}));  // soft cap
  }
}

// Size-1 dims whose strides are 1 (as DLPack exporters write them): the batch dim at B = 1
// and the token dim at S = 1. Their strides address nothing, so the call keeps the fast
// kernel (core/unit_strides.h) and its results.
TEST(PrefillHopper, CudaSizeOneDimsWithOddStrides) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const Device dev = cuda0();
  // A [n0, n1, n2, n3] view of a fresh buffer with stride 1 for its size-1 dims.
  const auto odd_view = [](const Tensor& t) {
    Shape strides = t.strides();
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.size(d) == 1) strides[size_t(d)] = 1;
    return t.as_strided(t.shape(), strides);
  };
  const std::tuple<int64_t, int64_t, int64_t> cases[] = {{1, 130, 300}, {2, 1, 257}};  // B, S, L
  for (const auto& [B, S, L] : cases) {
    const int64_t Hq = 8, Hkv = 2, D = 128;
    const std::string what = "sdpa B=" + std::to_string(B) + " S=" + std::to_string(S) +
                             " L=" + std::to_string(L) + ", size-1 dims of stride 1";
    SCOPED_TRACE(what);
    const Tensor q = odd_view(random_tensor(rng, {B, Hq, S, D}, DType::bf16, dev, -2, 2));
    const Tensor k = odd_view(random_tensor(rng, {B, Hkv, L, D}, DType::bf16, dev, -2, 2));
    const Tensor v = odd_view(random_tensor(rng, {B, Hkv, L, D}, DType::bf16, dev));
    const AttentionParams p{0.0f, false, -1, 0.0f};
    const oracle::Result ref = oracle::sdpa(q, k, v, Tensor(), p);
    Tensor out = odd_view(poisoned({B, Hq, S, D}, DType::bf16, dev));
    Tensor lse = odd_view(poisoned({B, Hq, S}, DType::f32, dev));
    sdpa(q, k, v, Tensor(), p, out, lse);
    expect_kernel(what);
    expect_output(out, ref.out, DType::bf16);
    expect_lse(lse, ref.lse, DType::bf16);
  }
}

// ---- ragged: [N, H, D] segments, bottom-right causal ---------------------------------------

struct RaggedCase {
  std::vector<int64_t> q_lens, kv_lens;  // kv_lens empty: self-attention
  int64_t Hq, Hkv, D;
  DType dtype;
  bool causal;
  // Multiplies key token t's K row (t counted within its segment); empty: all 1.
  std::function<double(int64_t)> key_scale = {};
  int math_warpgroups = 0;  // expect_kernel
  std::string str() const {
    std::ostringstream os;
    os << "ragged q_lens=" << fpt::str(q_lens) << " kv_lens=" << fpt::str(kv_lens)
       << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D << " " << dtype_name(dtype)
       << " causal=" << causal;
    return os.str();
  }
};

std::vector<int64_t> indptr_of(const std::vector<int64_t>& lens) {
  std::vector<int64_t> v{0};
  for (int64_t n : lens) v.push_back(v.back() + n);
  return v;
}

// Host K [N, Hkv, D] with token t of each segment [kvp[i], kvp[i + 1]) scaled by
// scale(t - kvp[i]), rounded back to k's dtype.
Tensor scaled_key_rows(const Tensor& k, const std::vector<int64_t>& kvp,
                       const std::function<double(int64_t)>& scale) {
  Tensor f = k.to(DType::f32);
  float* e = f.data_as<float>();
  const int64_t row = f.numel() / f.shape()[0];  // Hkv * D elements per token
  for (size_t i = 0; i + 1 < kvp.size(); ++i)
    for (int64_t t = kvp[i]; t < kvp[i + 1]; ++t)
      for (int64_t j = 0; j < row; ++j) e[t * row + j] *= float(scale(t - kvp[i]));
  return f.to(k.dtype());
}

void run_ragged(Rng& rng, const RaggedCase& c) {
  SCOPED_TRACE(c.str());
  const Device dev = cuda0();
  const auto qo = indptr_of(c.q_lens);
  const auto kvp = indptr_of(c.kv_lens.empty() ? c.q_lens : c.kv_lens);
  const Tensor qo_t = host_ints(qo).to(dev);
  const Tensor kv_t = c.kv_lens.empty() ? Tensor() : host_ints(kvp).to(dev);
  const Tensor q = random_tensor(rng, {qo.back(), c.Hq, c.D}, c.dtype, dev, -2, 2);
  Tensor k = random_tensor(rng, {kvp.back(), c.Hkv, c.D}, c.dtype, Device::cpu(), -2, 2);
  if (c.key_scale) k = scaled_key_rows(k, kvp, c.key_scale);
  k = k.to(dev);
  const Tensor v = random_tensor(rng, {kvp.back(), c.Hkv, c.D}, c.dtype, dev);
  const AttentionParams p{0.0f, c.causal, -1, 0.0f};
  const oracle::Result ref = oracle::prefill_ragged(q, k, v, qo_t, kv_t, p);
  Tensor out = poisoned({qo.back(), c.Hq, c.D}, c.dtype, dev);
  Tensor lse = poisoned({qo.back(), c.Hq}, DType::f32, dev);
  batch_prefill_ragged(q, k, v, qo_t, kv_t, p, out, lse);
  expect_kernel(c.str(), c.math_warpgroups);
  expect_output(out, ref.out, c.dtype);
  expect_lse(lse, ref.lse, c.dtype);
}

TEST(PrefillHopper, CudaRagged) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256})
      for (bool causal : {false, true}) {
        FP_CASE(run_ragged(rng, {{1, 0, 129, 300, 7}, {}, 8, 2, d, t, causal}));
        FP_CASE(run_ragged(rng, {{113, 1, 128}, {300, 40, 128}, 8, 2, d, t, causal}));  // cached prefix
        FP_CASE(run_ragged(rng, {{200, 64}, {150, 64}, 4, 4, d, t, causal}));  // L < S in a row
      }
  // 300 rows: the kernel's longest-row scan (scheduler.cuh, schedule) takes several passes,
  // and the longest row sits near the end.
  std::vector<int64_t> many(300);
  for (size_t i = 0; i < many.size(); ++i) many[i] = int64_t(i * 7 % 23);
  many[287] = 261;
  // MHA at head_dim 64 as well: ~9 M tiles per block, so every Q ring (three stages there)
  // wraps round several times.
  for (bool causal : {false, true}) {
    FP_CASE(run_ragged(rng, {many, {}, 8, 2, 128, DType::bf16, causal}));
    FP_CASE(run_ragged(rng, {many, {}, 4, 4, 64, DType::f16, causal}));
  }
}

// Row maxima that rise by more than the softmax's held-max slack (consumer_softmax.cuh,
// kHeldMaxSlack: 8 in log2 units) from one K/V tile to the next, so the lazy rescale must
// take the new max and rescale O mid-row, not only hold it. Logits here have a spread of
// ~2 (log2 units) at scale 1, and a tile's max is ~5 times its scale: key scales 1, 4, 7
// and 10 by 128-token band (maxima ~15 apart, both ways in the kernel's last-tile-first
// order), and a ramp that falls along the row (rising by ~8-10 per 128-key tile in that
// order, around the slack itself).
TEST(PrefillHopper, CudaRaggedMaximaRiseAcrossKeyTiles) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const auto bands = [](int64_t t) { return 1.0 + 3.0 * double(t / 128 % 4); };
  const auto ramp = [](int64_t t) { return 1.0 + 11.0 * std::max(0.0, 1.0 - double(t) / 700.0); };
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256})
      for (bool causal : {false, true}) {
        FP_CASE(run_ragged(rng, {{700, 129}, {}, 8, 2, d, t, causal, bands}));
        FP_CASE(run_ragged(rng, {{64, 700}, {700, 700}, 4, 4, d, t, causal, ramp}));
      }
}

// A build with the cluster experiment (FLASHPAGE_PREFILL_CLUSTER, scheduler.cuh) runs
// non-causal calls whose rows make few ghost tiles on its cluster kernel: pairs of M tiles of
// one row and KV head on two blocks that share each K/V tile. Here: an even group (pairs of
// subtiles), MHA with an even and an odd number of query ranges (ghosts), ragged rows read
// from the device (one of them without keys), and K/V large enough for bands of fewer KV
// heads than the call has (split_band: about 24 MB a band). Elsewhere the test is skipped.
// Whether this process runs the cluster experiment's kernel where it applies: a cluster build,
// with neither its run-time switch nor TMA K/V turned off.
bool cluster_pairs_expected() {
  const auto off = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && std::atoi(v) == 0;
  };
  return hopper_expected() && flashpage::cuda::prefill_hopper_cluster_build() &&
         !off("FLASHPAGE_PREFILL_MULTICAST") && !off("FLASHPAGE_PREFILL_TMA");
}

TEST(PrefillHopper, CudaClusterPairsRunWhereBuilt) {
  FP_REQUIRE_CUDA();
  if (!cluster_pairs_expected()) GTEST_SKIP() << "no cluster kernel in this build or run";
  FP_SEEDED_RNG(rng);
  const auto expect_pairs = [](const std::string& what) {
    EXPECT_STREQ(flashpage::cuda::last_prefill_kernel(), "hopper_pairs") << what;
  };
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256}) {
      const SdpaCase gqa{2, 8, 2, 520, 700, d, t, false};
      FP_CASE(run_sdpa(rng, gqa));
      expect_pairs(gqa.str());
      const SdpaCase mha{1, 4, 4, 1030, 1030, d, t, false};  // 9 ranges: one ghost per head
      FP_CASE(run_sdpa(rng, mha));
      expect_pairs(mha.str());
    }
  const RaggedCase ragged{{600, 900, 520}, {700, 0, 530}, 8, 2, 128, DType::bf16, false};
  FP_CASE(run_ragged(rng, ragged));
  expect_pairs(ragged.str());
  const RaggedCase mha{{1024, 1024}, {}, 4, 4, 64, DType::f16, false};
  FP_CASE(run_ragged(rng, mha));
  expect_pairs(mha.str());
  // 4 KV heads of 12800 keys (6.5 MB each at head_dim 128): bands of 3 heads.
  const SdpaCase banded{1, 4, 4, 256, 12800, 128, DType::bf16, false};
  FP_CASE(run_sdpa(rng, banded));
  expect_pairs(banded.str());
}

// Causal schedules of at least two virtual tiles per block are folded (scheduler.cuh): a
// block takes a query range and then its mirror. These have an odd number of ranges (the
// middle one has no mirror) and, like the 300-row case above (an even number), enough tiles
// to fold on any GPU of up to 132 SMs, also with the default dense units, where the rows'
// ranges run back to back (scheduler.cuh seek_row) and a tile and its mirror lie in rows at
// opposite ends of the batch. Tiles: 17 ranges in all (FLASHPAGE_PREFILL_DENSE_RAGGED=0: 4 a
// row).
TEST(PrefillHopper, CudaRaggedCausalFolded) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const std::vector<int64_t> lens = {300, 129, 257, 1, 200, 400, 130};
  FP_CASE(run_ragged(rng, {lens, {}, 32, 8, 128, DType::bf16, true}));   // 544 (old units: 896)
  FP_CASE(run_ragged(rng, {lens, {}, 20, 20, 256, DType::f16, true}));   // 340 (old units: 560)
  FP_CASE(run_ragged(rng, {{800, 513, 650}, {}, 16, 16, 64, DType::bf16, true}));  // 288 (old: 336)
}

// Hundreds and thousands of rows: the dense units find their rows through a table of every
// 32nd row's first unit (scheduler.cuh seek_row), so 700 rows take one pass over 22 entries
// and one over the entry's 32 rows; 9000 rows outgrow the table's 256 entries and take an
// entry every 64 rows (five passes over 141 entries, then up to two over the rows). Empty
// rows and rows of several ranges fall inside and across entries.
TEST(PrefillHopper, CudaRaggedManyRows) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  std::vector<int64_t> lens(700);  // 3% of 300 tokens (2-3 ranges), 10% empty, else 1-40
  for (int64_t& n : lens) n = rng.coin(0.03) ? 300 : rng.coin(0.1) ? 0 : rng.integer(1, 40);
  for (bool causal : {false, true}) {
    FP_CASE(run_ragged(rng, {lens, {}, 8, 2, 128, DType::bf16, causal}));
    FP_CASE(run_ragged(rng, {lens, {}, 4, 4, 64, DType::f16, causal}));
  }
  std::vector<int64_t> many(9000);  // 0.3% of 200 tokens, 30% empty, else 1-4
  for (int64_t& n : many) n = rng.coin(0.003) ? 200 : rng.coin(0.3) ? 0 : rng.integer(1, 4);
  FP_CASE(run_ragged(rng, {many, {}, 8, 2, 128, DType::bf16, false}));
  FP_CASE(run_ragged(rng, {many, {}, 4, 4, 64, DType::f16, true}));
}

// On the Hopper kernel the ragged call reads its rows' lengths on the device only, so it can
// be captured in a CUDA graph; replayed after qo_indptr changed in place (the same total, a
// longer longest row: 3 query ranges instead of 2), it must follow the new segments.
TEST(PrefillHopper, CudaRaggedGraphFollowsMovedSegments) {
  FP_REQUIRE_CUDA();
  if (!hopper_expected()) GTEST_SKIP() << "ragged prefill is capturable on the Hopper kernel only";
  FP_SEEDED_RNG(rng);
  const Device dev = cuda0();
  const std::vector<int64_t> first = {100, 200, 0, 57}, moved = {300, 7, 40, 10};
  const int64_t n = 357, hq = 8, hkv = 2, d = 128;
  const DType t = DType::bf16;
  Tensor qo = host_ints(indptr_of(first)).to(dev);
  const Tensor q = random_tensor(rng, {n, hq, d}, t, dev, -2, 2);
  const Tensor k = random_tensor(rng, {n, hkv, d}, t, dev, -2, 2);
  const Tensor v = random_tensor(rng, {n, hkv, d}, t, dev);
  const AttentionParams p{0.0f, true, -1, 0.0f};
  Tensor out = poisoned({n, hq, d}, t, dev);
  Tensor lse = poisoned({n, hq}, DType::f32, dev);

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  batch_prefill_ragged(q, k, v, qo, Tensor(), p, out, lse, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  expect_kernel("captured ragged prefill");

  for (const auto* lens : {&first, &moved}) {
    SCOPED_TRACE("q_lens " + fpt::str(*lens));
    qo.copy_(host_ints(indptr_of(*lens)));  // same device buffer: the graph keeps its address
    out.fill_(NAN);
    lse.fill_(NAN);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const oracle::Result ref = oracle::prefill_ragged(q, k, v, qo, Tensor(), p);
    expect_output(out, ref.out, t);
    expect_lse(lse, ref.lse, t);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- paged: the plan's work list, pages of any size, NHD/HND ---------------------------

struct HopperPagedCase {
  std::vector<int64_t> lengths;  // keys per row
  std::vector<int64_t> q_lens;   // empty: uniform S
  int64_t S, page_size, Hq, Hkv, D;
  KvLayout layout;
  DType dtype;
  bool causal;
  int window_left = -1;
  float soft_cap = 0;
  int math_warpgroups = 0;  // expect_kernel
  std::string str() const {
    std::ostringstream os;
    os << "paged lengths=" << fpt::str(lengths) << " q_lens=" << fpt::str(q_lens) << " S=" << S
       << " P=" << page_size << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D << " "
       << layout_name(layout) << " " << dtype_name(dtype) << " causal=" << causal
       << " window=" << window_left << " cap=" << soft_cap;
    return os.str();
  }
};

void run_paged(Rng& rng, const HopperPagedCase& c) {
  SCOPED_TRACE(c.str());
  const Device dev = cuda0();
  const int64_t B = int64_t(c.lengths.size());
  const fpt::PagedCase pc =
      random_paged(rng, c.lengths, c.page_size, c.Hkv, c.D, c.layout, c.dtype, dev);
  const AttentionParams p{0.0f, c.causal, c.window_left, c.soft_cap};
  const bool ragged = !c.q_lens.empty();
  Tensor host_qo, qo;
  Shape out_shape, lse_shape;
  if (ragged) {
    const auto indptr = indptr_of(c.q_lens);
    host_qo = host_ints(indptr);
    qo = host_qo.to(dev);
    out_shape = {indptr.back(), c.Hq, c.D};
    lse_shape = {indptr.back(), c.Hq};
  } else {
    out_shape = {B, c.Hq, c.S, c.D};
    lse_shape = {B, c.Hq, c.S};
  }
  const Tensor q = random_tensor(rng, out_shape, c.dtype, dev, -2, 2);
  const oracle::Result ref = oracle::prefill_paged(q, qo, pc.kv, Tensor(), p);
  Workspace ws(dev, size_t(32) << 20);
  const Plan plan = plan_prefill(ws, host_qo, pc.host_table, pc.kv, ragged ? 0 : c.S, c.Hq);
  Tensor out = poisoned(out_shape, c.dtype, dev);
  Tensor lse = poisoned(lse_shape, DType::f32, dev);
  batch_prefill_paged(ws, plan, q, qo, pc.kv, Tensor(), p, out, lse);
  expect_kernel(c.str(), c.math_warpgroups);
  expect_output(out, ref.out, c.dtype);
  expect_lse(lse, ref.lse, c.dtype);
}

TEST(PrefillHopper, CudaPaged) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256})
      for (int64_t page : {1, 16, 64})
        for (KvLayout layout : {KvLayout::NHD, KvLayout::HND}) {
          // Ragged queries over a cached prefix, an empty row, GQA 4.
          FP_CASE(run_paged(rng, {{300, 0, 129, 40}, {113, 0, 129, 7}, 0, page, 8, 2, d, layout, t, true}));
          // Uniform S, MHA (work-list pairs merge into 128-token tiles), not causal.
          FP_CASE(run_paged(rng, {{257, 130}, {}, 129, page, 2, 2, d, layout, t, false}));
        }
}

// CudaClusterPairsRunWhereBuilt for paged prefill's work lists, where pairs stay inside a
// 64-token item (groups that are multiples of 4): ragged rows whose last items are short
// (ghosts) and uniform rows.
TEST(PrefillHopper, CudaPagedClusterPairsRunWhereBuilt) {
  FP_REQUIRE_CUDA();
  if (!cluster_pairs_expected()) GTEST_SKIP() << "no cluster kernel in this build or run";
  FP_SEEDED_RNG(rng);
  const HopperPagedCase cases[] = {
      {{700, 520}, {600, 520}, 0, 16, 8, 2, 128, KvLayout::NHD, DType::bf16, false},
      {{700, 520}, {}, 520, 32, 16, 2, 64, KvLayout::HND, DType::f16, false},
      {{1000, 600}, {530, 600}, 0, 16, 32, 2, 256, KvLayout::NHD, DType::bf16, false},
      // A 20-token row (its single item pairs with another row's: a ghost in separate
      // items), a row without queries and one without keys; group 12.
      {{1500, 300, 50, 0}, {1400, 20, 0, 700}, 0, 16, 8, 2, 128, KvLayout::NHD, DType::bf16,
       false},
      {{900, 640}, {900, 640}, 0, 16, 24, 2, 64, KvLayout::HND, DType::f16, false}};
  for (const HopperPagedCase& c : cases) {
    FP_CASE(run_paged(rng, c));
    EXPECT_STREQ(flashpage::cuda::last_prefill_kernel(), "hopper_pairs") << c.str();
  }
}

TEST(PrefillHopper, CudaPagedWindowSoftCap) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16}) {
    FP_CASE(run_paged(rng, {{500, 90}, {}, 40, 16, 8, 1, 128, KvLayout::NHD, t, true, 64, 20.0f}));
    FP_CASE(run_paged(rng, {{300, 301}, {300, 1}, 0, 3, 4, 2, 64, KvLayout::HND, t, true, 100}));
  }
}

// A folded causal work list (scheduler.cuh): 17 item pairs (odd), 544 virtual tiles.
TEST(PrefillHopper, CudaPagedCausalFolded) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  FP_CASE(run_paged(rng, {{800, 513, 650}, {800, 300, 650}, 0, 16, 16, 16, 64, KvLayout::NHD,
                          DType::bf16, true}));
  FP_CASE(run_paged(rng, {{800, 513, 650}, {800, 300, 650}, 0, 16, 32, 8, 128, KvLayout::HND,
                          DType::f16, true}));
}

// Odd groups: a pair of work items that is one query range needs `group` subtiles, the
// planner's trailing pairs of single items one more (scheduler.cuh). Four rows with single
// items (two such pairs), group 3 and MHA, causal and not.
TEST(PrefillHopper, CudaPagedOddGroupSingles) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (bool causal : {false, true}) {
    FP_CASE(run_paged(rng, {{300, 129, 64, 1}, {300, 129, 64, 1}, 0, 16, 6, 2, 128, KvLayout::NHD,
                            DType::bf16, causal}));
    FP_CASE(run_paged(rng, {{300, 129, 64, 70}, {300, 129, 1, 70}, 0, 16, 4, 4, 64, KvLayout::HND,
                            DType::f16, causal}));
  }
}

// Pages that are no power of two but hold whole 16-row TMA boxes (kv_tma.h): a producer
// warp's 32-row slice then spans two pages, and at head_dim 256 each 16-row slice is one box.
TEST(PrefillHopper, CudaPagedOddPageSizes) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  FP_CASE(run_paged(rng, {{700, 333}, {200, 57}, 0, 48, 8, 2, 128, KvLayout::NHD, DType::bf16, true}));
  FP_CASE(run_paged(rng, {{650, 170}, {}, 150, 80, 4, 1, 64, KvLayout::HND, DType::f16, false}));
  FP_CASE(run_paged(rng, {{520, 97}, {}, 90, 48, 4, 2, 256, KvLayout::NHD, DType::bf16, true, 200}));
}

// Head_dim 64 calls without causal masking or a window run 192-row M tiles on three math
// warpgroups where their rows do not pad the tiles away (warpgroup_choice.h), and paged ones
// leave the plan's work list (the kernel cuts the rows itself); the rest stay on two.
TEST(PrefillHopper, CudaThreeMathWarpgroups) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16}) {
    // A group of 3: 540 packed rows, a token's three heads straddling warpgroups.
    FP_CASE(run_sdpa(rng, {1, 6, 2, 180, 333, 64, t, false, -1, 0, 3}));
    // MHA, 150 rows: the third warpgroup holds 22.
    FP_CASE(run_sdpa(rng, {2, 3, 3, 150, 150, 64, t, false, -1, 0, 3}));
    FP_CASE(run_sdpa(rng, {1, 2, 2, 180, 330, 64, t, false, -1, 20.0f, 3}));  // soft cap
    // 400 rows: the last tile's 16 leave the second and third warpgroups idle.
    FP_CASE(run_sdpa(rng, {2, 2, 2, 400, 260, 64, t, false, -1, 0, 3}));
    // Two: causal; a window; rows that pad 192-row tiles more than the third warpgroup gains
    // (256 rows: two tiles of 192 against two of 128; 100: one of 192 against one of 128).
    FP_CASE(run_sdpa(rng, {1, 2, 2, 384, 384, 64, t, true, -1, 0, 2}));
    FP_CASE(run_sdpa(rng, {1, 2, 2, 384, 384, 64, t, false, 100, 0, 2}));
    FP_CASE(run_sdpa(rng, {1, 2, 2, 256, 300, 64, t, false, -1, 0, 2}));
    FP_CASE(run_sdpa(rng, {2, 2, 2, 100, 260, 64, t, false, -1, 0, 2}));
    // 512 rows: three with K/V by TMA (pages of 16), two by cp.async (pages of 1: padding,
    // and under 768 keys a row).
    FP_CASE(run_paged(rng, {{600, 512}, {}, 512, 16, 2, 2, 64, KvLayout::NHD, t, false, -1, 0, 3}));
    FP_CASE(run_paged(rng, {{600, 512}, {}, 512, 1, 2, 2, 64, KvLayout::NHD, t, false, -1, 0, 2}));
    // Ragged rows, one empty, GQA 2.
    FP_CASE(run_ragged(rng, {{384, 400, 0, 370}, {}, 4, 2, 64, t, false, {}, 3}));
    // Ranges whose last tile leaves the second and third warpgroups without rows (16, 50, 20,
    // 6 and 24 tokens), between whole ones: idle warpgroups next to working ones, both ways
    // round across tile boundaries (consumer_mainloop.cuh, kIdleSkip).
    FP_CASE(run_ragged(rng, {{400, 50, 384, 20, 390, 600}, {}, 2, 2, 64, t, false, {}, 3}));
    FP_CASE(run_ragged(rng, {{400, 50, 384, 20, 390, 600}, {}, 4, 2, 64, t, false, {}, 3}));
    // Paged: uniform S and ragged queries over longer rows, the work list left.
    FP_CASE(run_paged(rng, {{700, 400}, {}, 384, 16, 4, 4, 64, KvLayout::NHD, t, false, -1, 0, 3}));
    // Pages of 1 (K/V by cp.async) need rows of 768+ keys for three.
    FP_CASE(run_paged(rng, {{1000, 900, 800}, {384, 300, 170}, 0, 1, 2, 2, 64, KvLayout::HND, t,
                            false, -1, 0, 3}));
  }
}

// The TMA K/V maps (kv_tma.h) are built where they apply and refused where they do not; the
// cases above then run through them (contiguous K/V, pages of 16 and 64) or through cp.async
// (pages of 1). A silent refusal would leave the TMA path untested, hence this check.
TEST(PrefillHopper, CudaKvTmaMaps) {
  FP_REQUIRE_CUDA();
#if !defined(FLASHPAGE_HAVE_SM90A)
  GTEST_SKIP() << "built without sm_90a";
#else
  using flashpage::cuda::PrefillTcParams;
  using flashpage::cuda::prefill_hopper::make_kv_tma;
  void* buf = nullptr;
  const int64_t elems = int64_t(1) << 24;
  ASSERT_EQ(cudaMalloc(&buf, elems * 2), cudaSuccess);
  const int32_t* fake_pages = reinterpret_cast<const int32_t*>(buf);  // never read here
  auto params = [&](int64_t H, int64_t D) {
    PrefillTcParams p;
    p.head_dim = int(D);
    p.num_qo_heads = int(4 * H);
    p.num_kv_heads = int(H);
    p.k = buf;
    p.v = buf;
    p.k_span = p.v_span = elems;
    return p;
  };
  // Contiguous [B, H, L, D]: heads further apart than tokens, boxes of a whole slice.
  PrefillTcParams c = params(8, 128);
  c.k_stride_unit = c.v_stride_unit = 8 * 1000 * 128;
  c.k_stride_head = c.v_stride_head = 1000 * 128;
  c.k_stride_token = c.v_stride_token = 128;
  auto t = make_kv_tma(c);
  EXPECT_EQ(t.box_rows, 32);
  EXPECT_EQ(t.k.token_dim, 1);
  EXPECT_EQ(t.k.unit_tokens, 8 * 1000);
  // NHD pages of 16 tokens: tokens further apart than heads; boxes of a page.
  PrefillTcParams n = params(2, 256);
  n.page_indices = fake_pages;
  n.page_size = 16;
  n.k_stride_unit = n.v_stride_unit = 16 * 2 * 256;
  n.k_stride_token = n.v_stride_token = 2 * 256;
  n.k_stride_head = n.v_stride_head = 256;
  t = make_kv_tma(n);
  EXPECT_EQ(t.box_rows, 16);
  EXPECT_EQ(t.v.token_dim, 2);
  EXPECT_EQ(t.v.unit_tokens, 16);
  // HND pages of 64 tokens, one KV head.
  PrefillTcParams h = params(1, 64);
  h.page_indices = fake_pages;
  h.page_size = 64;
  h.k_stride_unit = h.v_stride_unit = 64 * 64;
  h.k_stride_head = h.v_stride_head = 64 * 64;
  h.k_stride_token = h.v_stride_token = 64;
  EXPECT_EQ(make_kv_tma(h).box_rows, 32);
  // Refused: pages under 16 tokens, a page stride that is no whole number of tokens, an
  // unknown extent.
  n.page_size = 8;
  EXPECT_EQ(make_kv_tma(n).box_rows, 0);
  n.page_size = 16;
  n.v_stride_unit += 8;
  EXPECT_EQ(make_kv_tma(n).box_rows, 0);
  c.k_span = 0;
  EXPECT_EQ(make_kv_tma(c).box_rows, 0);
  cudaFree(buf);
#endif
}

}  // namespace
}  // namespace fpt
