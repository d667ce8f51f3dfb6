// Every op runs on its tensors' GPU, whichever device the caller has current, and leaves the
// caller's device current: an engine that drives one GPU per thread (or per layer shard) does
// not have to call cudaSetDevice around flashpage. Needs two GPUs; skips otherwise.
#include <cuda_runtime_api.h>

#include "test_util.h"

namespace fpt {
namespace {

constexpr int kCallerDevice = 0;
const Device kOther = Device::cuda(1);

int current_device() {
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  return device;
}

class MultiDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2)
      GTEST_SKIP() << "needs two CUDA devices (found " << count << ")";
    ASSERT_EQ(cudaSetDevice(kCallerDevice), cudaSuccess);
  }
  // After each op: the caller's device is still current and the op's work completed
  // without an error on the other device.
  void expect_caller_device_kept(const char* op) {
    EXPECT_EQ(current_device(), kCallerDevice) << op << " left another device current";
    synchronize(kOther);
  }
};

TEST_F(MultiDevice, PagedDecodeAndPrefill) {
  FP_SEEDED_RNG(rng);
  const int64_t hq = 8, hkv = 2, d = 128, page = 16;
  const PagedCase c = random_paged(rng, {1, 17, 300, 64}, page, hkv, d, KvLayout::NHD,
                                   DType::bf16, kOther);
  const Tensor q = random_tensor(rng, {4, hq, d}, DType::bf16, kOther);
  Tensor lse;
  const Tensor out = batch_decode(q, c.kv, {}, &lse);
  expect_caller_device_kept("batch_decode");
  EXPECT_EQ(out.device(), kOther);
  const oracle::Result ref = oracle::decode(q, c.kv, {});
  expect_output(out, ref.out, DType::bf16);
  expect_lse(lse, ref.lse, DType::bf16);

  AttentionParams causal;
  causal.causal = true;
  const Tensor qp = random_tensor(rng, {4, hq, 1, d}, DType::bf16, kOther);
  const Tensor outp = batch_prefill_paged(qp, Tensor(), c.kv, Tensor(), causal);
  expect_caller_device_kept("batch_prefill_paged");
  expect_output(outp, oracle::prefill_paged(qp, Tensor(), c.kv, Tensor(), causal).out,
                DType::bf16);
}

TEST_F(MultiDevice, RaggedSdpaAndMerge) {
  FP_SEEDED_RNG(rng);
  const Tensor indptr = host_ints({0, 5, 5, 70}).to(kOther);
  const Tensor q = random_tensor(rng, {70, 4, 64}, DType::f16, kOther);
  const Tensor k = random_tensor(rng, {70, 2, 64}, DType::f16, kOther);
  const Tensor v = random_tensor(rng, {70, 2, 64}, DType::f16, kOther);
  AttentionParams causal;
  causal.causal = true;
  Tensor lse;
  const Tensor out = batch_prefill_ragged(q, k, v, indptr, Tensor(), causal, &lse);
  expect_caller_device_kept("batch_prefill_ragged");
  const oracle::Result ref = oracle::prefill_ragged(q, k, v, indptr, Tensor(), causal);
  expect_output(out, ref.out, DType::f16);

  const Tensor qs = random_tensor(rng, {2, 4, 33, 64}, DType::bf16, kOther);
  const Tensor ks = random_tensor(rng, {2, 4, 47, 64}, DType::bf16, kOther);
  const Tensor vs = random_tensor(rng, {2, 4, 47, 64}, DType::bf16, kOther);
  const Tensor outs = sdpa(qs, ks, vs);
  expect_caller_device_kept("sdpa");
  expect_output(outs, oracle::sdpa(qs, ks, vs, Tensor(), {}).out, DType::bf16);

  // The ragged result merged with itself is itself (equal halves: the LSE grows by log 2).
  Tensor merged = poisoned(out.shape(), DType::f16, kOther);
  merge_states(out, lse, out, lse, merged);
  expect_caller_device_kept("merge_states");
  expect_output(merged, ref.out, DType::f16, "merged");
}

TEST_F(MultiDevice, AppendAndGather) {
  FP_SEEDED_RNG(rng);
  const int64_t hkv = 2, d = 64, page = 4;
  const PagedCase c =
      random_paged(rng, {9, 3}, page, hkv, d, KvLayout::HND, DType::bf16, kOther);
  // Overwrite position 2 of row 0 and position 0 of row 1, then read everything back.
  const Tensor k = random_tensor(rng, {2, hkv, d}, DType::bf16, kOther);
  const Tensor v = random_tensor(rng, {2, hkv, d}, DType::bf16, kOther);
  append_paged_kv(k, v, host_ints({0, 1}).to(kOther), host_ints({2, 0}).to(kOther), c.kv);
  expect_caller_device_kept("append_paged_kv");
  Tensor k_out = poisoned({12, hkv, d}, DType::bf16, kOther);
  Tensor v_out = poisoned({12, hkv, d}, DType::bf16, kOther);
  gather_paged_kv(c.kv, k_out, v_out);
  expect_caller_device_kept("gather_paged_kv");
  const oracle::Dense got_k = oracle::dense(k_out), got_v = oracle::dense(v_out);
  const oracle::Dense want_k = oracle::dense(k), want_v = oracle::dense(v);
  // Gathered token 2 is row 0's position 2; token 9 is row 1's position 0 (row 0 has 9).
  for (int64_t e = 0; e < hkv * d; ++e) {
    EXPECT_EQ(got_k.v[size_t(2 * hkv * d + e)], want_k.v[size_t(e)]);
    EXPECT_EQ(got_v.v[size_t(2 * hkv * d + e)], want_v.v[size_t(e)]);
    EXPECT_EQ(got_k.v[size_t(9 * hkv * d + e)], want_k.v[size_t(hkv * d + e)]);
    EXPECT_EQ(got_v.v[size_t(9 * hkv * d + e)], want_v.v[size_t(hkv * d + e)]);
  }
  EXPECT_EQ(count_nan(k_out), 0);
  EXPECT_EQ(count_nan(v_out), 0);
}

}  // namespace
}  // namespace fpt
