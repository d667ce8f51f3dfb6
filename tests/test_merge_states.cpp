// merge_states: two partial results over disjoint key sets combine into the result over
// all keys; -inf LSEs (no keys) merge cleanly.
#include "test_util.h"

namespace fpt {
namespace {

// Random partial states; some rows get -inf on one side or both (zeros in v then, as an op
// that saw no key writes).
struct Partials {
  Tensor va, la, vb, lb;
};

Partials random_partials(Rng& rng, int64_t N, int64_t H, int64_t D, DType dtype, Device device) {
  Partials p;
  Tensor la = Tensor::empty({N, H}, DType::f32), lb = Tensor::empty({N, H}, DType::f32);
  Tensor va = random_tensor(rng, {N, H, D}, DType::f32, Device::cpu());
  Tensor vb = random_tensor(rng, {N, H, D}, DType::f32, Device::cpu());
  for (int64_t i = 0; i < N * H; ++i) {
    const int64_t kind = rng.integer(0, 5);  // 0: a empty, 1: b empty, 2: both, else finite
    la.data_as<float>()[i] = kind == 0 || kind == 2 ? -INFINITY : float(rng.uniform(-8, 8));
    lb.data_as<float>()[i] = kind == 1 || kind == 2 ? -INFINITY : float(rng.uniform(-8, 8));
    for (int64_t x = 0; x < D; ++x) {
      if (kind == 0 || kind == 2) va.data_as<float>()[i * D + x] = 0;
      if (kind == 1 || kind == 2) vb.data_as<float>()[i * D + x] = 0;
    }
  }
  p.va = va.to(dtype).to(device);
  p.vb = vb.to(dtype).to(device);
  p.la = la.to(device);
  p.lb = lb.to(device);
  return p;
}

void run_merge_formula(Rng& rng, int64_t N, int64_t H, int64_t D, DType dtype, Device device) {
  SCOPED_TRACE("N=" + std::to_string(N) + " H=" + std::to_string(H) + " D=" + std::to_string(D) +
               " " + std::string(dtype_name(dtype)) + " on " + device.str());
  const Partials p = random_partials(rng, N, H, D, dtype, device);
  const oracle::Result ref = oracle::merge(p.va, p.la, p.vb, p.lb);
  Tensor out = poisoned({N, H, D}, dtype, device);
  Tensor lse = poisoned({N, H}, DType::f32, device);
  merge_states(p.va, p.la, p.vb, p.lb, out, lse);
  expect_output(out, ref.out, dtype);
  expect_lse(lse, ref.lse, dtype);

  // v_out may alias v_a; lse_out may be undefined.
  Tensor alias = p.va.clone();
  merge_states(alias, p.la, p.vb, p.lb, alias);
  expect_output(alias, ref.out, dtype, "out aliasing v_a");
  // lse_out may alias lse_a (every thread of a pair reads it before it is written).
  Tensor lse_alias = p.la.clone();
  Tensor out2 = poisoned({N, H, D}, dtype, device);
  merge_states(p.va, lse_alias, p.vb, p.lb, out2, lse_alias);
  expect_output(out2, ref.out, dtype, "out with lse_out aliasing lse_a");
  expect_lse(lse_alias, ref.lse, dtype);
}

TEST(MergeStates, CpuFormula) {
  FP_SEEDED_RNG(rng);
  FP_CASE(run_merge_formula(rng, 1, 1, 8, DType::f32, Device::cpu()));
  FP_CASE(run_merge_formula(rng, 37, 4, 64, DType::f32, Device::cpu()));
  FP_CASE(run_merge_formula(rng, 9, 8, 40, DType::f32, Device::cpu()));
  FP_CASE(run_merge_formula(rng, 13, 2, 128, DType::bf16, Device::cpu()));
  FP_CASE(run_merge_formula(rng, 13, 2, 128, DType::f16, Device::cpu()));
  FP_CASE(run_merge_formula(rng, 6, 3, 0, DType::f32, Device::cpu()));  // D = 0: only the LSE
}

// Attention over keys [0, split) merged with attention over [split, L) equals attention over
// all L keys (ragged prefill computes the halves; the oracle the whole).
void run_merge_halves(Rng& rng, const std::vector<int64_t>& q_lens,
                      const std::vector<int64_t>& kv_lens, int64_t Hq, int64_t Hkv, int64_t D,
                      DType dtype, Device device) {
  SCOPED_TRACE("q_lens=" + str(q_lens) + " kv_lens=" + str(kv_lens) + " " +
               std::string(dtype_name(dtype)) + " on " + device.str());
  std::vector<int64_t> qo{0}, kvp{0}, a_ptr{0}, b_ptr{0}, a_rows, b_rows;
  for (size_t b = 0; b < q_lens.size(); ++b) {
    qo.push_back(qo.back() + q_lens[b]);
    kvp.push_back(kvp.back() + kv_lens[b]);
    const int64_t split = rng.integer(0, kv_lens[b]);  // either half may be empty
    a_ptr.push_back(a_ptr.back() + split);
    b_ptr.push_back(b_ptr.back() + kv_lens[b] - split);
    for (int64_t j = 0; j < split; ++j) a_rows.push_back(kvp[b] + j);
    for (int64_t j = split; j < kv_lens[b]; ++j) b_rows.push_back(kvp[b] + j);
  }
  const Tensor q = random_tensor(rng, {qo.back(), Hq, D}, dtype, device, -2, 2);
  const Tensor k = random_tensor(rng, {kvp.back(), Hkv, D}, dtype, Device::cpu(), -2, 2);
  const Tensor v = random_tensor(rng, {kvp.back(), Hkv, D}, dtype, Device::cpu());
  auto pick_rows = [&](const Tensor& src, const std::vector<int64_t>& rows) {
    Tensor t = Tensor::empty({int64_t(rows.size()), Hkv, D}, dtype);
    for (size_t r = 0; r < rows.size(); ++r)
      t.select(0, int64_t(r)).copy_(src.select(0, rows[r]));
    return t.to(device);
  };
  const Tensor qo_t = host_ints(qo).to(device);
  const AttentionParams p{};  // not causal: each half is an ordinary key set
  const oracle::Result ref =
      oracle::prefill_ragged(q, k.to(device), v.to(device), qo_t, host_ints(kvp).to(device), p);

  Tensor lse_a, lse_b;
  const Tensor out_a = batch_prefill_ragged(q, pick_rows(k, a_rows), pick_rows(v, a_rows), qo_t,
                                            host_ints(a_ptr).to(device), p, &lse_a);
  const Tensor out_b = batch_prefill_ragged(q, pick_rows(k, b_rows), pick_rows(v, b_rows), qo_t,
                                            host_ints(b_ptr).to(device), p, &lse_b);
  Tensor out = poisoned({qo.back(), Hq, D}, dtype, device);
  Tensor lse = poisoned({qo.back(), Hq}, DType::f32, device);
  merge_states(out_a, lse_a, out_b, lse_b, out, lse);
  expect_output(out, ref.out, dtype);
  expect_lse(lse, ref.lse, dtype);
}

TEST(MergeStates, CpuHalvesEqualWhole) {
  FP_SEEDED_RNG(rng);
  FP_CASE(run_merge_halves(rng, {3, 1, 4}, {20, 1, 0}, 4, 2, 64, DType::f32, Device::cpu()));
  FP_CASE(run_merge_halves(rng, {5, 2}, {113, 16}, 8, 1, 128, DType::f32, Device::cpu()));
  FP_CASE(run_merge_halves(rng, {5, 2}, {40, 7}, 4, 4, 64, DType::bf16, Device::cpu()));
}

TEST(MergeStates, CudaFormula) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256}) FP_CASE(run_merge_formula(rng, 77, 8, d, t, cuda0()));
  FP_CASE(run_merge_formula(rng, 33, 4, 128, DType::f32, cuda0()));
  FP_CASE(run_merge_formula(rng, 6, 3, 0, DType::bf16, cuda0()));  // D = 0: only the LSE
  FP_CASE(run_merge_formula(rng, 5, 3, 8, DType::f16, cuda0()));   // D below a warp
  // More (token, head) pairs than the grid's 2^20 blocks: the grid-stride loop's second pass.
  FP_CASE(run_merge_formula(rng, (1 << 18) + 7, 4, 8, DType::f16, cuda0()));
}

TEST(MergeStates, CudaHalvesEqualWhole) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    FP_CASE(run_merge_halves(rng, {3, 1, 40}, {300, 1, 0}, 16, 2, 128, t, cuda0()));
}

}  // namespace
}  // namespace fpt
