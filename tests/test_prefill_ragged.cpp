// batch_prefill_ragged: variable-length segments without a cache (MHA/GQA, causal or not,
// separate kv_indptr with bottom-right alignment), against the oracle.
#include "test_util.h"

namespace fpt {
namespace {

struct RaggedCase {
  std::vector<int64_t> q_lens;
  std::vector<int64_t> kv_lens;  // empty: self-attention (kv_indptr undefined)
  int64_t Hq, Hkv, D;
  DType dtype = DType::f32;
  bool causal = true;
  int window_left = -1;
  float soft_cap = 0;
  int64_t pad_rows = 0;  // query rows past qo_indptr[B] (a graph's fixed-size buffer)

  std::string str() const {
    std::ostringstream os;
    os << "q_lens=" << fpt::str(q_lens) << " kv_lens=" << fpt::str(kv_lens) << " Hq=" << Hq
       << " Hkv=" << Hkv << " D=" << D << " " << dtype_name(dtype) << " causal=" << causal
       << " window=" << window_left << " cap=" << soft_cap << " pad=" << pad_rows;
    return os.str();
  }
};

std::vector<int64_t> indptr_of(const std::vector<int64_t>& lens) {
  std::vector<int64_t> v{0};
  for (int64_t n : lens) v.push_back(v.back() + n);
  return v;
}

void run_ragged(Rng& rng, const RaggedCase& c, Device device) {
  SCOPED_TRACE(c.str() + " on " + device.str());
  const auto qo = indptr_of(c.q_lens);
  const auto kvp = indptr_of(c.kv_lens.empty() ? c.q_lens : c.kv_lens);
  const Tensor qo_t = host_ints(qo).to(device);
  const Tensor kv_t = c.kv_lens.empty() ? Tensor() : host_ints(kvp).to(device);
  const int64_t rows = qo.back();
  const Tensor q = random_tensor(rng, {rows + c.pad_rows, c.Hq, c.D}, c.dtype, device, -2, 2);
  const Tensor k = random_tensor(rng, {kvp.back(), c.Hkv, c.D}, c.dtype, device, -2, 2);
  const Tensor v = random_tensor(rng, {kvp.back(), c.Hkv, c.D}, c.dtype, device);
  const AttentionParams p{0.0f, c.causal, c.window_left, c.soft_cap};
  const oracle::Result ref = oracle::prefill_ragged(q.slice(0, 0, rows), k, v, qo_t, kv_t, p);

  Tensor out = poisoned({rows + c.pad_rows, c.Hq, c.D}, c.dtype, device);
  Tensor lse = poisoned({rows + c.pad_rows, c.Hq}, DType::f32, device);
  batch_prefill_ragged(q, k, v, qo_t, kv_t, p, out, lse);
  expect_output(out.slice(0, 0, rows), ref.out, c.dtype);
  expect_lse(lse.slice(0, 0, rows), ref.lse, c.dtype);
  if (c.pad_rows > 0) {  // padding: neither read into nor written
    expect_unwritten_rows(out, rows, "out");
    expect_unwritten_rows(lse, rows, "lse");
    return;  // the allocating form has no padding to keep
  }

  Tensor lse1;
  const Tensor out1 = batch_prefill_ragged(q, k, v, qo_t, kv_t, p, &lse1);
  expect_output(out1, ref.out, c.dtype, "out (allocating form)");
  expect_lse(lse1, ref.lse, c.dtype);
}

TEST(PrefillRagged, CpuSelfAttention) {
  FP_SEEDED_RNG(rng);
  const std::vector<RaggedCase> cases{
      {{1}, {}, 1, 1, 64},
      {{5, 17, 1, 33}, {}, 4, 4, 64},                        // MHA causal
      {{5, 17, 1, 33}, {}, 4, 4, 64, DType::f32, false},     // MHA not causal
      {{9, 0, 113}, {}, 8, 2, 128},                          // GQA, empty segment
      {{9, 0, 113}, {}, 8, 1, 40, DType::f32, false},        // MQA, odd head_dim
      {{16, 3}, {}, 6, 3, 8},                                // head_dim 8
      {{30, 12}, {}, 4, 2, 64, DType::f32, true, 4},         // window
      {{30, 12}, {}, 4, 2, 64, DType::f32, false, -1, 3.0f}, // soft cap
  };
  for (const auto& c : cases) FP_CASE(run_ragged(rng, c, Device::cpu()));
}

TEST(PrefillRagged, CpuSeparateKvIndptr) {
  FP_SEEDED_RNG(rng);
  const std::vector<RaggedCase> cases{
      {{3, 5, 1}, {10, 5, 40}, 4, 2, 64},                    // S < L: bottom-right
      {{3, 5, 0}, {0, 2, 7}, 4, 2, 64},                      // L < S and L == 0: rows that see nothing
      {{4, 6}, {20, 6}, 8, 4, 128, DType::f32, false},
      {{7, 7}, {50, 9}, 4, 1, 64, DType::f32, true, 10},
  };
  for (const auto& c : cases) FP_CASE(run_ragged(rng, c, Device::cpu()));
}

// Query rows past qo_indptr[B] are padding: on every kernel (the CUDA cases pick the generic
// kernel for f32 and head_dim 40, the tensor-core ones for f16/bf16 at 64 and 128).
std::vector<RaggedCase> padded_cases(DType half) {
  return {
      {{5, 17, 1}, {}, 4, 2, 64, DType::f32, true, -1, 0, 7},
      {{9, 0, 30}, {40, 3, 30}, 4, 4, 40, DType::f32, false, -1, 0, 33},
      {{70, 3}, {}, 8, 2, 128, half, true, -1, 0, 64},
      {{65, 130}, {100, 130}, 4, 4, 64, half, false, -1, 0, 1},
  };
}

TEST(PrefillRagged, CpuPaddingRows) {
  FP_SEEDED_RNG(rng);
  for (const auto& c : padded_cases(DType::bf16)) FP_CASE(run_ragged(rng, c, Device::cpu()));
}

TEST(PrefillRagged, CudaPaddingRows) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType half : {DType::bf16, DType::f16})
    for (const auto& c : padded_cases(half)) FP_CASE(run_ragged(rng, c, cuda0()));
}

TEST(PrefillRagged, CpuHalfPrecision) {
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::f16, DType::bf16}) FP_CASE(run_ragged(rng, {{20, 41}, {}, 8, 2, 128, t}, Device::cpu()));
}

RaggedCase random_case(Rng& rng, const std::vector<int64_t>& head_dims, int64_t max_group,
                       DType dtype, int64_t longest) {
  RaggedCase c;
  const int64_t B = rng.integer(1, 6);
  const bool cross = rng.coin(0.3);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = rng.coin(0.15) ? 0 : rng.integer(1, longest);
    c.q_lens.push_back(n);
    if (cross) c.kv_lens.push_back(n + rng.integer(0, longest));
  }
  c.Hkv = rng.integer(1, 3);
  c.Hq = c.Hkv * rng.integer(1, max_group);
  c.D = rng.pick(head_dims);
  c.dtype = dtype;
  c.causal = rng.coin(0.6);
  if (rng.coin(0.25)) c.window_left = int(rng.integer(0, 30));
  if (rng.coin(0.25)) c.soft_cap = float(rng.uniform(1.0, 30.0));
  return c;
}

TEST(PrefillRagged, CpuRandomSweep) {
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 20 * test_scale(); ++i)
    FP_CASE(run_ragged(rng, random_case(rng, {8, 40, 64, 128}, 8, DType::f32, 60), Device::cpu()));
}

TEST(PrefillRagged, CudaFixedCases) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256})
      for (int64_t group : {1, 2, 8, 16}) {
        FP_CASE(run_ragged(rng, {{1, 0, 65, 200}, {}, 2 * group, 2, d, t}, cuda0()));
        FP_CASE(run_ragged(rng, {{17, 64, 1}, {200, 64, 129}, group, 1, d, t, group % 2 == 0}, cuda0()));
      }
}

TEST(PrefillRagged, CudaRandomSweep) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 30 * test_scale(); ++i)
    FP_CASE(run_ragged(rng,
               random_case(rng, {64, 128, 256}, 16, rng.coin(0.5) ? DType::bf16 : DType::f16, 150),
               cuda0()));
}

// A window wider than any row (INT32_MAX, a common "no window" sentinel) sees every key, also
// for rows with more queries than keys, whose bottom-right positions are negative (the CUDA
// kernels computed position - window_left in int32 and wrapped to an empty window).
void run_widest_window(Device device, DType dtype) {
  FP_SEEDED_RNG(rng);
  SCOPED_TRACE(device.str());
  const std::vector<int64_t> qo{0, 40, 45}, kvp{0, 3, 20};
  const Tensor q = random_tensor(rng, {45, 4, 64}, dtype, device, -2, 2);
  const Tensor k = random_tensor(rng, {20, 2, 64}, dtype, device, -2, 2);
  const Tensor v = random_tensor(rng, {20, 2, 64}, dtype, device);
  for (bool causal : {false, true}) {
    AttentionParams p{};
    p.causal = causal;
    const oracle::Result ref = oracle::prefill_ragged(q, k, v, host_ints(qo), host_ints(kvp), p);
    p.window_left = INT32_MAX;
    Tensor out = poisoned({45, 4, 64}, dtype, device);
    batch_prefill_ragged(q, k, v, host_ints(qo).to(device), host_ints(kvp).to(device), p, out);
    expect_output(out, ref.out, dtype, causal ? "causal" : "not causal");
  }
}

TEST(PrefillRagged, CpuWidestWindow) { FP_CASE(run_widest_window(Device::cpu(), DType::f32)); }

TEST(PrefillRagged, CudaWidestWindow) {
  FP_REQUIRE_CUDA();
  FP_CASE(run_widest_window(cuda0(), DType::bf16));
}

}  // namespace
}  // namespace fpt
