// batch_prefill_paged: uniform [B,Hq,S,D] and ragged [N,Hq,D] queries over a paged KV cache,
// bottom-right causal, masks that replace causal, window, soft cap, LSE; against the oracle.
#include "test_util.h"

namespace fpt {
namespace {

enum class MaskKind { none, boolean, additive };

struct PrefillCase {
  std::vector<int64_t> lengths;  // keys per row
  std::vector<int64_t> q_lens;   // ragged queries per row; empty = uniform S
  int64_t S;                     // uniform queries per row
  int64_t page_size, Hq, Hkv, D;
  KvLayout layout = KvLayout::NHD;
  DType dtype = DType::f32;
  bool causal = true;
  MaskKind mask = MaskKind::none;
  int mask_rank = 2;  // [S,L], [B,S,L], [B,1|Hq,S,L] (rank 4: mask_heads)
  int64_t mask_heads = 1;
  int window_left = -1;
  float soft_cap = 0;
  int64_t pad_rows = 0;  // ragged only: query rows past qo_indptr[B]

  std::string str() const {
    std::ostringstream os;
    os << "lengths=" << fpt::str(lengths) << " q_lens=" << fpt::str(q_lens) << " S=" << S
       << " P=" << page_size << " Hq=" << Hq << " Hkv=" << Hkv << " D=" << D << " "
       << layout_name(layout) << " " << dtype_name(dtype) << " causal=" << causal
       << " mask=" << int(mask) << " rank " << mask_rank << " heads " << mask_heads
       << " window=" << window_left << " cap=" << soft_cap << " pad=" << pad_rows;
    return os.str();
  }
};

Tensor random_mask(Rng& rng, const PrefillCase& c, Device device) {
  const int64_t B = int64_t(c.lengths.size());
  const int64_t L = *std::max_element(c.lengths.begin(), c.lengths.end());
  Shape shape = c.mask_rank == 2   ? Shape{c.S, L}
                : c.mask_rank == 3 ? Shape{B, c.S, L}
                                   : Shape{B, c.mask_heads, c.S, L};
  Tensor h = Tensor::empty(shape, c.mask == MaskKind::boolean ? DType::boolean : DType::f32);
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (c.mask == MaskKind::boolean)
      h.data_as<uint8_t>()[i] = rng.coin(0.7);
    else
      h.data_as<float>()[i] = rng.coin(0.2) ? -INFINITY : float(rng.uniform(-3.0, 1.0));
  }
  return h.to(device);
}

void run_prefill(Rng& rng, const PrefillCase& c, Device device) {
  SCOPED_TRACE(c.str() + " on " + device.str());
  const int64_t B = int64_t(c.lengths.size());
  const PagedCase pc = random_paged(rng, c.lengths, c.page_size, c.Hkv, c.D, c.layout, c.dtype, device);
  const AttentionParams p{0.0f, c.causal, c.window_left, c.soft_cap};
  const bool ragged = !c.q_lens.empty();
  Tensor host_qo, qo, q;
  Shape out_shape, lse_shape;
  if (ragged) {
    std::vector<int64_t> indptr{0};
    for (int64_t n : c.q_lens) indptr.push_back(indptr.back() + n);
    host_qo = host_ints(indptr);
    qo = host_qo.to(device);
    out_shape = {indptr.back() + c.pad_rows, c.Hq, c.D};
    lse_shape = {indptr.back() + c.pad_rows, c.Hq};
  } else {
    out_shape = {B, c.Hq, c.S, c.D};
    lse_shape = {B, c.Hq, c.S};
  }
  q = random_tensor(rng, out_shape, c.dtype, device, -2, 2);
  const Tensor mask = c.mask == MaskKind::none ? Tensor() : random_mask(rng, c, device);
  const int64_t rows = out_shape[0] - c.pad_rows;  // the planned ones
  const oracle::Result ref = oracle::prefill_paged(q.slice(0, 0, rows), qo, pc.kv, mask, p);

  Workspace ws(device, size_t(32) << 20);
  const Plan plan = plan_prefill(ws, host_qo, pc.host_table, pc.kv, ragged ? 0 : c.S, c.Hq);
  Tensor out = poisoned(out_shape, c.dtype, device);
  Tensor lse = poisoned(lse_shape, DType::f32, device);
  batch_prefill_paged(ws, plan, q, qo, pc.kv, mask, p, out, lse);
  expect_output(out.slice(0, 0, rows), ref.out, c.dtype);
  expect_lse(lse.slice(0, 0, rows), ref.lse, c.dtype);
  if (c.pad_rows > 0) {  // padding: neither read into nor written
    expect_unwritten_rows(out, rows, "out");
    expect_unwritten_rows(lse, rows, "lse");
    return;  // the one-shot form has no padding to keep
  }

  Tensor lse1;
  const Tensor out1 = batch_prefill_paged(q, qo, pc.kv, mask, p, &lse1);
  expect_output(out1, ref.out, c.dtype, "out (one-shot)");
  expect_lse(lse1, ref.lse, c.dtype);
}

TEST(PrefillPaged, CpuUniformCausal) {
  FP_SEEDED_RNG(rng);
  const std::vector<PrefillCase> cases{
      {{5, 5}, {}, 5, 16, 4, 4, 64},                          // S == L: plain causal
      {{40, 17, 16}, {}, 4, 16, 8, 2, 64},                    // S < L: bottom-right
      {{3, 9}, {}, 6, 3, 4, 1, 64, KvLayout::HND},            // a row with L < S: early queries see nothing
      {{0, 113, 1}, {}, 7, 1, 6, 3, 40},                      // empty row, page size 1
      {{64, 65}, {}, 3, 64, 8, 8, 128, KvLayout::HND, DType::f32, false},  // not causal
      {{30, 50}, {}, 12, 16, 8, 2, 8},                        // head_dim 8
  };
  for (const auto& c : cases) FP_CASE(run_prefill(rng, c, Device::cpu()));
}

TEST(PrefillPaged, CpuRaggedQueries) {
  FP_SEEDED_RNG(rng);
  const std::vector<PrefillCase> cases{
      {{10, 33, 0, 16}, {3, 33, 0, 1}, 0, 16, 4, 2, 64},      // chunked prefill, an empty row
      {{17, 5}, {0, 5}, 0, 3, 8, 1, 64, KvLayout::HND},       // a row with no queries
      {{100, 20}, {20, 20}, 0, 64, 4, 4, 128, KvLayout::NHD, DType::f32, false},
  };
  for (const auto& c : cases) FP_CASE(run_prefill(rng, c, Device::cpu()));
}

// Ragged query rows past qo_indptr[B] (padding) on every kernel: f32 / head_dim 40 take the
// generic CUDA kernel, f16/bf16 at 64 and 128 the tensor-core ones.
std::vector<PrefillCase> padded_cases(DType half) {
  PrefillCase a{{10, 33, 0, 16}, {3, 33, 0, 1}, 0, 16, 4, 2, 64};
  a.pad_rows = 5;
  PrefillCase b{{17, 5}, {0, 5}, 0, 3, 8, 1, 40, KvLayout::HND};
  b.pad_rows = 40;
  PrefillCase c{{300, 90}, {130, 90}, 0, 16, 8, 2, 128, KvLayout::NHD, half};
  c.pad_rows = 64;
  PrefillCase d{{100, 20}, {20, 20}, 0, 1, 4, 4, 64, KvLayout::HND, half, false};
  d.pad_rows = 1;
  return {a, b, c, d};
}

TEST(PrefillPaged, CpuPaddingRows) {
  FP_SEEDED_RNG(rng);
  for (const auto& c : padded_cases(DType::bf16)) FP_CASE(run_prefill(rng, c, Device::cpu()));
}

TEST(PrefillPaged, CudaPaddingRows) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType half : {DType::bf16, DType::f16})
    for (const auto& c : padded_cases(half)) FP_CASE(run_prefill(rng, c, cuda0()));
}

// plan_prefill reads a host qo_indptr through its stride: every other entry of a buffer plans
// like the same values stored contiguously.
TEST(PrefillPaged, CpuStridedQoIndptrPlans) {
  FP_SEEDED_RNG(rng);
  const PagedCase pc = random_paged(rng, {40, 3, 17}, 16, 2, 64, KvLayout::NHD, DType::f32, Device::cpu());
  const Tensor strided = host_ints({0, -7, 20, -7, 21, -7, 60}).as_strided({4}, {2});
  Workspace ws(Device::cpu(), size_t(4) << 20);
  const Plan a = plan_prefill(ws, strided, pc.host_table, pc.kv, 0, 4);
  const Plan b = plan_prefill(ws, host_ints({0, 20, 21, 60}), pc.host_table, pc.kv, 0, 4);
  EXPECT_EQ(a.total_q_rows, 60);
  EXPECT_EQ(a.total_q_rows, b.total_q_rows);
  EXPECT_EQ(a.num_work, b.num_work);
}

TEST(PrefillPaged, CpuMasksReplaceCausal) {
  FP_SEEDED_RNG(rng);
  for (MaskKind kind : {MaskKind::boolean, MaskKind::additive}) {
    FP_CASE(run_prefill(rng, {{12, 7, 20}, {}, 5, 16, 4, 2, 64, KvLayout::NHD, DType::f32, true, kind, 2}, Device::cpu()));
    FP_CASE(run_prefill(rng, {{12, 7, 20}, {}, 5, 3, 4, 2, 64, KvLayout::HND, DType::f32, true, kind, 3}, Device::cpu()));
    FP_CASE(run_prefill(rng, {{12, 7, 20}, {}, 5, 16, 4, 2, 64, KvLayout::NHD, DType::f32, true, kind, 4, 1}, Device::cpu()));
    FP_CASE(run_prefill(rng, {{12, 7, 20}, {}, 5, 1, 4, 2, 64, KvLayout::HND, DType::f32, false, kind, 4, 4}, Device::cpu()));
  }
}

TEST(PrefillPaged, CpuWindowAndSoftCap) {
  FP_SEEDED_RNG(rng);
  FP_CASE(run_prefill(rng, {{50, 9}, {}, 8, 16, 4, 2, 64, KvLayout::NHD, DType::f32, true, MaskKind::none, 2, 1, 5}, Device::cpu()));
  FP_CASE(run_prefill(rng, {{50, 9}, {}, 8, 16, 4, 2, 64, KvLayout::NHD, DType::f32, false, MaskKind::none, 2, 1, 5}, Device::cpu()));
  FP_CASE(run_prefill(rng, {{50, 9}, {}, 8, 16, 4, 2, 64, KvLayout::HND, DType::f32, true, MaskKind::none, 2, 1, -1, 2.5f}, Device::cpu()));
}

TEST(PrefillPaged, CpuHalfPrecision) {
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::f16, DType::bf16})
    FP_CASE(run_prefill(rng, {{33, 70}, {}, 9, 16, 8, 2, 128, KvLayout::NHD, t}, Device::cpu()));
}

PrefillCase random_case(Rng& rng, const std::vector<int64_t>& page_sizes,
                        const std::vector<int64_t>& head_dims, int64_t max_group, DType dtype,
                        int64_t longest, int64_t max_q) {
  PrefillCase c;
  c.page_size = rng.pick(page_sizes);
  const int64_t B = rng.integer(1, 5);
  c.lengths = interesting_lengths(rng, c.page_size, B, longest);
  if (*std::max_element(c.lengths.begin(), c.lengths.end()) == 0) c.lengths[0] = 1;
  c.Hkv = rng.integer(1, 3);
  c.Hq = c.Hkv * rng.integer(1, max_group);
  c.D = rng.pick(head_dims);
  c.layout = rng.coin(0.5) ? KvLayout::NHD : KvLayout::HND;
  c.dtype = dtype;
  c.causal = rng.coin(0.7);
  if (rng.coin(0.4)) {
    for (int64_t len : c.lengths) c.q_lens.push_back(rng.integer(0, std::min(len, max_q)));
  } else {
    c.S = rng.integer(1, max_q);
    if (rng.coin(0.3)) {
      c.mask = rng.coin(0.5) ? MaskKind::boolean : MaskKind::additive;
      c.mask_rank = int(rng.integer(2, 4));
      c.mask_heads = rng.coin(0.5) ? 1 : c.Hq;
    }
  }
  if (rng.coin(0.25)) c.window_left = int(rng.integer(0, 40));
  if (rng.coin(0.25)) c.soft_cap = float(rng.uniform(1.0, 30.0));
  return c;
}

TEST(PrefillPaged, CpuRandomSweep) {
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 20 * test_scale(); ++i)
    FP_CASE(run_prefill(rng, random_case(rng, {1, 3, 16, 64}, {8, 40, 64, 128}, 8, DType::f32, 150, 24),
                Device::cpu()));
}

TEST(PrefillPaged, CudaFixedCases) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256}) {
      FP_CASE(run_prefill(rng, {{0, 1, 16, 17, 300}, {}, 17, 16, 8, 2, d, KvLayout::NHD, t}, cuda0()));
      FP_CASE(run_prefill(rng, {{1, 255, 256, 257}, {1, 100, 0, 257}, 0, 1, 16, 1, d, KvLayout::HND, t}, cuda0()));
      FP_CASE(run_prefill(rng, {{70, 200}, {}, 65, 256, 4, 4, d, KvLayout::NHD, t, true, MaskKind::boolean, 4, 4}, cuda0()));
      FP_CASE(run_prefill(rng, {{70, 200}, {}, 33, 64, 4, 2, d, KvLayout::HND, t, true, MaskKind::additive, 3}, cuda0()));
      FP_CASE(run_prefill(rng, {{500, 90}, {}, 40, 16, 8, 1, d, KvLayout::NHD, t, true, MaskKind::none, 2, 1, 64, 20.0f}, cuda0()));
    }
}

TEST(PrefillPaged, CudaRandomSweep) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 20 * test_scale(); ++i)
    FP_CASE(run_prefill(rng,
                random_case(rng, {1, 3, 16, 64, 256}, {64, 128, 256}, 16,
                            rng.coin(0.5) ? DType::bf16 : DType::f16, 300, 64),
                cuda0()));
}

// A plan's work list covers query tiles; keys come from the table at run time, so a plan (or
// a graph replaying it) runs over rows that grew since it was made. The window must not be
// narrowed to the plan's table (it was: a window of 30 over rows grown from 10 to 40 keys saw
// 20, the plan's total), nor wrap for an INT32_MAX "no window".
void run_window_over_grown_rows(Device device, DType dtype) {
  FP_SEEDED_RNG(rng);
  SCOPED_TRACE(device.str());
  KvCacheConfig cfg;
  cfg.layers = 1;
  cfg.kv_heads = 2;
  cfg.head_dim = 64;
  cfg.page_size = 4;
  cfg.num_pages = 24;
  cfg.dtype = dtype;
  cfg.device = device;
  KvCachePool pool(cfg);
  pool.activate(std::vector<int64_t>{pool.bind_request(40), pool.bind_request(40)});
  pool.put(0, 0, random_tensor(rng, {2, 40, 2, 64}, dtype, device, -2, 2),
           random_tensor(rng, {2, 40, 2, 64}, dtype, device));
  Workspace ws(device, size_t(4) << 20);
  const Plan plan = plan_prefill(ws, Tensor(), pool.metadata(10).host, pool.layer(0, pool.metadata(10)), 4, 4);
  const KvCacheMetadata& grown = pool.metadata(40);  // same rows: the same buffers, in place
  const Tensor q = random_tensor(rng, {2, 4, 4, 64}, dtype, device, -2, 2);
  for (int window : {30, INT32_MAX}) {
    SCOPED_TRACE("window_left " + std::to_string(window));
    AttentionParams p{};
    p.causal = true;
    p.window_left = window;
    Tensor out = poisoned({2, 4, 4, 64}, dtype, device);
    batch_prefill_paged(ws, plan, q, Tensor(), pool.layer(0, grown), Tensor(), p, out);
    expect_output(out, oracle::prefill_paged(q, Tensor(), pool.layer(0, grown), Tensor(), p).out,
                  dtype);
  }
}

TEST(PrefillPaged, CpuWindowOverGrownRows) {
  FP_CASE(run_window_over_grown_rows(Device::cpu(), DType::f32));
}

TEST(PrefillPaged, CudaWindowOverGrownRows) {
  FP_REQUIRE_CUDA();
  FP_CASE(run_window_over_grown_rows(cuda0(), DType::bf16));
}

}  // namespace
}  // namespace fpt
