// batch_decode over a paged KV cache (plan/run with a Workspace, and the one-shot form),
// against the float64 oracle.
#include <functional>

#include "ops/stream_decode_plan.h"
#include "test_util.h"

namespace fpt {
namespace {

struct DecodeCase {
  std::vector<int64_t> lengths;
  int64_t page_size, Hq, Hkv, D;
  KvLayout layout = KvLayout::NHD;
  DType dtype = DType::f32;
  int window_left = -1;
  float soft_cap = 0;
  float scale = 0;

  std::string str() const {
    std::ostringstream os;
    os << "lengths=" << fpt::str(lengths) << " P=" << page_size << " Hq=" << Hq << " Hkv=" << Hkv
       << " D=" << D << " " << layout_name(layout) << " " << dtype_name(dtype)
       << " window=" << window_left << " cap=" << soft_cap << " scale=" << scale;
    return os.str();
  }
};

void run_decode(Rng& rng, const DecodeCase& c, Device device, size_t ws_bytes = size_t(32) << 20,
                bool expect_split = false,
                const std::function<void(const Plan&)>& check_plan = nullptr) {
  SCOPED_TRACE(c.str() + " on " + device.str());
  const int64_t B = int64_t(c.lengths.size());
  const PagedCase pc = random_paged(rng, c.lengths, c.page_size, c.Hkv, c.D, c.layout, c.dtype, device);
  const AttentionParams p{c.scale, false, c.window_left, c.soft_cap};
  const Tensor q = random_tensor(rng, {B, c.Hq, c.D}, c.dtype, device, -2, 2);
  const oracle::Result ref = oracle::decode(q, pc.kv, p);

  Workspace ws(device, ws_bytes);
  const Plan plan = plan_decode(ws, pc.host_table, pc.kv, c.Hq);
  EXPECT_EQ(plan.kind, Plan::Kind::decode);
  EXPECT_EQ(plan.batch_size, B);
  // ops.h: the planner splits long rows into KV chunks so the device is busy at any batch size.
  if (expect_split) {
    EXPECT_GT(plan.num_partials, 0) << "a long row of a tiny batch was not split";
  }
  if (check_plan) check_plan(plan);
  Tensor out = poisoned({B, c.Hq, c.D}, c.dtype, device);
  Tensor lse = poisoned({B, c.Hq}, DType::f32, device);
  batch_decode(ws, plan, q, pc.kv, p, out, lse);
  expect_output(out, ref.out, c.dtype);
  expect_lse(lse, ref.lse, c.dtype);

  // q as [B, Hq, 1, D]: same answer, output in the query's layout; no lse requested.
  Tensor out4 = poisoned({B, c.Hq, 1, c.D}, c.dtype, device);
  batch_decode(ws, plan, q.view({B, c.Hq, 1, c.D}), pc.kv, p, out4);
  oracle::Dense ref4 = ref.out;
  ref4.shape = {B, c.Hq, 1, c.D};
  expect_output(out4, ref4, c.dtype, "out [B,Hq,1,D]");

  // One-shot form.
  Tensor lse1;
  const Tensor out1 = batch_decode(q, pc.kv, p, &lse1);
  expect_output(out1, ref.out, c.dtype, "out (one-shot)");
  expect_lse(lse1, ref.lse, c.dtype);
}

TEST(Decode, CpuFixedCases) {
  FP_SEEDED_RNG(rng);
  const std::vector<DecodeCase> cases{
      {{1}, 1, 1, 1, 64},
      {{16, 17, 1, 0, 113}, 16, 4, 4, 64},                     // MHA, empty row, page edges
      {{5, 3, 64, 65}, 64, 8, 2, 128, KvLayout::HND},          // GQA 4, HND
      {{7, 1, 0, 3}, 3, 8, 1, 64},                             // MQA, page size 3
      {{9, 2}, 1, 6, 3, 40},                                   // page size 1, odd head_dim
      {{12, 30}, 16, 2, 2, 8, KvLayout::HND},                  // head_dim 8
      {{0, 0}, 16, 4, 2, 64},                                  // nothing to see
      {{40, 100, 3}, 16, 8, 2, 64, KvLayout::NHD, DType::f32, 10},         // window
      {{40, 100, 3}, 16, 8, 2, 64, KvLayout::HND, DType::f32, -1, 4.0f, 1.0f},  // soft cap
  };
  for (const auto& c : cases) FP_CASE(run_decode(rng, c, Device::cpu()));
}

TEST(Decode, CpuHalfPrecision) {
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::f16, DType::bf16})
    FP_CASE(run_decode(rng, {{33, 1, 70}, 16, 8, 2, 128, KvLayout::NHD, t}, Device::cpu()));
}

// A single long row on a single KV head: the planner splits it into KV chunks whose
// partial results are merged (DESIGN.md: plan splits long rows so the device is busy).
TEST(Decode, CpuLongRowSplitIntoChunks) {
  FP_SEEDED_RNG(rng);
  FP_CASE(run_decode(rng, {{3000}, 16, 4, 1, 64}, Device::cpu(), Workspace::kDefaultBytes, true));
  FP_CASE(run_decode(rng, {{3001, 5}, 3, 2, 1, 64, KvLayout::HND}, Device::cpu(),
                     Workspace::kDefaultBytes, true));
  FP_CASE(run_decode(rng, {{2500}, 16, 8, 1, 64, KvLayout::NHD, DType::f32, 700}, Device::cpu()));
}

DecodeCase random_case(Rng& rng, const std::vector<int64_t>& page_sizes,
                       const std::vector<int64_t>& head_dims, int64_t max_group, DType dtype,
                       int64_t longest) {
  DecodeCase c;
  c.page_size = rng.pick(page_sizes);
  c.lengths = interesting_lengths(rng, c.page_size, rng.integer(1, 7), longest);
  c.Hkv = rng.integer(1, 4);
  c.Hq = c.Hkv * rng.integer(1, max_group);
  c.D = rng.pick(head_dims);
  c.layout = rng.coin(0.5) ? KvLayout::NHD : KvLayout::HND;
  c.dtype = dtype;
  if (rng.coin(0.25)) c.window_left = int(rng.integer(0, 50));
  if (rng.coin(0.25)) c.soft_cap = float(rng.uniform(1.0, 30.0));
  return c;
}

// The one-shot form sizes its own workspace: a batch whose work list is larger than the
// default one-shot buffer's integer share (140000 rows) still runs.
TEST(Decode, CpuOneShotLargeBatch) {
  FP_SEEDED_RNG(rng);
  std::vector<int64_t> lengths(140000);
  for (auto& len : lengths) len = rng.integer(0, 2);
  FP_CASE(run_decode(rng, {lengths, 1, 2, 1, 8}, Device::cpu()));
}

TEST(Decode, CpuRandomSweep) {
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 25 * test_scale(); ++i)
    FP_CASE(run_decode(rng, random_case(rng, {1, 3, 16, 64}, {8, 40, 64, 128}, 8, DType::f32, 200),
               Device::cpu()));
}

// One plan serves every layer of a step: same table, different pages and queries (the work
// list, its partial slots and merge are reused; nothing of a layer may leak into the next).
void run_plan_reused(Rng& rng, const std::vector<int64_t>& lengths, int64_t hq, int64_t hkv,
                     int64_t d, DType dtype, Device device) {
  SCOPED_TRACE("lengths=" + str(lengths) + " Hq=" + std::to_string(hq) + " Hkv=" +
               std::to_string(hkv) + " D=" + std::to_string(d) + " on " + device.str());
  const int64_t batch = int64_t(lengths.size());
  PagedCase pc = random_paged(rng, lengths, 16, hkv, d, KvLayout::NHD, dtype, device);
  Workspace ws(device, size_t(32) << 20);
  const Plan plan = plan_decode(ws, pc.host_table, pc.kv, hq);
  for (int layer = 0; layer < 3; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    pc.kv.k_pages = random_pages(rng, pc.kv.k_pages.shape(), pc.host_table, KvLayout::NHD,
                                 dtype, device);
    pc.kv.v_pages = random_pages(rng, pc.kv.v_pages.shape(), pc.host_table, KvLayout::NHD,
                                 dtype, device);
    const Tensor q = random_tensor(rng, {batch, hq, d}, dtype, device, -2, 2);
    const auto ref = oracle::decode(q, pc.kv, {});
    Tensor out = poisoned({batch, hq, d}, dtype, device);
    Tensor lse = poisoned({batch, hq}, DType::f32, device);
    batch_decode(ws, plan, q, pc.kv, {}, out, lse);
    expect_output(out, ref.out, dtype);
    expect_lse(lse, ref.lse, dtype);
  }
}

TEST(Decode, CpuPlanReusedAcrossLayers) {
  FP_SEEDED_RNG(rng);
  FP_CASE(run_plan_reused(rng, {20, 1, 47}, 8, 2, 64, DType::f32, Device::cpu()));
  // A long row beside short ones, half precision.
  FP_CASE(run_plan_reused(rng, {3000, 5, 0, 17}, 8, 2, 64, DType::bf16, Device::cpu()));
}

TEST(Decode, CudaPlanReusedAcrossLayers) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  // A long row cut over many blocks beside rows of one or a few pieces.
  const std::vector<int64_t> lengths{20000, 5, 300, 1, 2500, 0};
  FP_CASE(run_plan_reused(rng, lengths, 32, 8, 128, DType::bf16, cuda0()));
  FP_CASE(run_plan_reused(rng, lengths, 16, 2, 256, DType::f16, cuda0()));
  FP_CASE(run_plan_reused(rng, lengths, 8, 1, 64, DType::bf16, cuda0()));
}

TEST(Decode, CudaFixedCases) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256})
      for (int64_t group : {1, 4, 8, 16}) {
        FP_CASE(run_decode(rng, {{0, 1, 16, 17, 300}, 16, 2 * group, 2, d, KvLayout::NHD, t}, cuda0()));
        FP_CASE(run_decode(rng, {{1, 2, 255, 256, 257}, 1, group, 1, d, KvLayout::HND, t}, cuda0()));
      }
}

TEST(Decode, CudaPageSizes) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  // Multiples of 8 take TMA boxes on sm_90 (8, 24: boxes that end inside or at a page's end).
  for (int64_t ps : {1, 3, 8, 16, 24, 64, 128, 256})
    for (KvLayout layout : {KvLayout::NHD, KvLayout::HND})
      FP_CASE(run_decode(rng, {{0, 1, ps, ps + 1, 700}, ps, 8, 2, 128, layout, DType::bf16}, cuda0()));
  // Single-token boxes where the 4-warp blocks' deeper ring wins over the in-block combine
  // (StreamDecodeTiling::block): 2 KV heads of a group of 16, 4 KV heads of a group of 16.
  for (int64_t ps : {1, 5})
    for (int64_t hkv : {2, 4})
      FP_CASE(run_decode(rng, {{0, 1, ps + 1, 2000, 333}, ps, 16 * hkv, hkv, 128, KvLayout::NHD,
                               DType::f16},
                         cuda0()));
}

TEST(Decode, CudaLongRows) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  FP_CASE(run_decode(rng, {{20000}, 16, 8, 1, 128, KvLayout::NHD, DType::bf16}, cuda0(),
             Workspace::kDefaultBytes, true));
  FP_CASE(run_decode(rng, {{9000, 1, 4097}, 64, 32, 8, 128, KvLayout::HND, DType::f16}, cuda0(),
             Workspace::kDefaultBytes));
  FP_CASE(run_decode(rng, {{5000, 3}, 16, 16, 2, 64, KvLayout::NHD, DType::bf16, 1000, 30.0f}, cuda0(),
             Workspace::kDefaultBytes));
}

// Many KV heads per row: the streamed sm_90 kernel copies the rows of 8, 4, 2 or 1 KV heads
// together (several head blocks per item at Hkv = 32; query groups above 16 take several
// sub-units; blocks of fewer than 8 heads share each head between 2, 4 or 8 warps, which write
// a partial each or (by default; not with FLASHPAGE_DECODE_COMBINE=0) combine their states
// in the block, on uncut rows and on the pieces of cut ones).
TEST(Decode, CudaHeadBlocks) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  struct Heads {
    int64_t hkv, group, d;
  };
  for (const Heads& h : std::vector<Heads>{{8, 4, 128}, {8, 8, 64}, {32, 1, 128}, {4, 4, 256},
                                           {6, 2, 64}, {8, 32, 64}, {16, 2, 256}, {3, 5, 128},
                                           {4, 4, 128}, {4, 8, 64}, {2, 20, 128}, {1, 8, 256},
                                           {1, 4, 128}})
    for (KvLayout layout : {KvLayout::NHD, KvLayout::HND})
      FP_CASE(run_decode(rng, {{0, 1, 15, 16, 17, 1000, 3000}, 16, h.hkv * h.group, h.hkv, h.d,
                               layout, rng.coin(0.5) ? DType::bf16 : DType::f16},
                         cuda0()));
  // A long row over every block, and a batch that packs many short rows into each block.
  FP_CASE(run_decode(rng, {{40000}, 16, 32, 8, 128, KvLayout::NHD, DType::bf16}, cuda0(),
                     Workspace::kDefaultBytes, true));
  std::vector<int64_t> many(300);
  for (auto& len : many) len = rng.integer(0, 40);
  FP_CASE(run_decode(rng, {many, 16, 32, 8, 128, KvLayout::NHD, DType::bf16}, cuda0()));
  // Head dims without a tensor-core tile run on the generic kernel (whole rows).
  FP_CASE(run_decode(rng, {{0, 5, 300}, 16, 8, 2, 96, KvLayout::NHD, DType::bf16}, cuda0()));
  // Window and soft cap on the streamed path: per-token copies (page 1), and TMA boxes whose
  // first box starts before the window (pages of 16 and 8).
  FP_CASE(run_decode(rng, {{5000, 70, 0}, 1, 32, 8, 128, KvLayout::NHD, DType::bf16, 700, 20.0f},
                     cuda0(), Workspace::kDefaultBytes));
  FP_CASE(run_decode(rng, {{5000, 70, 0, 3001}, 16, 32, 8, 128, KvLayout::NHD, DType::bf16, 701},
                     cuda0(), Workspace::kDefaultBytes));
  FP_CASE(run_decode(rng, {{4099, 70, 9}, 8, 16, 4, 256, KvLayout::HND, DType::f16, 333, 30.0f},
                     cuda0(), Workspace::kDefaultBytes));
}

// Batches of about as many (row, KV-head part) pairs as SMs (src/ops/stream_decode_plan.h):
// on the streamed kernel each row's KV heads run as Plan::head_parts virtual rows; equal
// lengths run uncut (nothing to merge), unequal ones are cut and merged per virtual row.
TEST(Decode, CudaHeadParts) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const bool streamed = std::getenv("FLASHPAGE_DECODE_KERNEL") == nullptr;
  int64_t sms = 132;  // the streamed kernel's plans run one block per SM: their grid
  if (streamed) {
    const PagedCase probe = random_paged(rng, {1}, 16, 8, 128, KvLayout::NHD, DType::bf16, cuda0());
    Workspace probe_ws(cuda0());
    sms = plan_decode(probe_ws, probe.host_table, probe.kv, 32).grid;
  }
  const char* mode = std::getenv("FLASHPAGE_DECODE_HEAD_PARTS");
  const bool default_policy = mode == nullptr || std::string(mode) == "1";
  const bool combine = flashpage::stream_decode_combine();  // the planner's reading of its knob
  // combine_only: the expectation holds where warps sharing a head combine in the block
  // (and blocks of 2 or 4 KV heads get 8 warps): the default, FLASHPAGE_DECODE_COMBINE=0 not.
  // one_head_only: the expectation needs blocks of one head on 8 warps as well
  // (the default; with FLASHPAGE_DECODE_ONE_HEAD_WIDE=0 these cases run cut rows).
  const bool one_head_wide = flashpage::stream_decode_one_head_wide();
  auto expect = [&](int64_t parts, bool uncut, bool combine_only = false,
                    bool one_head_only = false) {
    return [=](const Plan& plan) {
      // The split kernel's plans keep whole rows' heads together; the knobs change P.
      if (!streamed || !default_policy || (combine_only && !combine) ||
          (one_head_only && !(combine && one_head_wide)))
        return;
      EXPECT_EQ(plan.head_parts, parts);
      if (uncut) {
        EXPECT_EQ(plan.num_partials, 0) << "equal rows that fit the blocks were cut";
      }
    };
  };
  auto uniform = [](int64_t batch, int64_t len) {
    return std::vector<int64_t>(static_cast<size_t>(batch), len);
  };
  auto ragged = [&](int64_t batch, int64_t longest) {
    std::vector<int64_t> v(static_cast<size_t>(batch));
    for (auto& len : v) len = rng.integer(0, longest);
    return v;
  };
  const size_t ws = Workspace::kDefaultBytes;
  // 32 KV heads: parts of 16 (P = 2) or 8 (P = 4) keep blocks of 8 heads.
  FP_CASE(run_decode(rng, {uniform(sms / 2, 300), 16, 32, 32, 128, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(2, true)));
  FP_CASE(run_decode(rng, {ragged(sms / 2, 900), 16, 64, 32, 128, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(2, false)));
  FP_CASE(run_decode(rng, {uniform(sms / 4, 129), 8, 32, 32, 64, KvLayout::HND, DType::f16},
                     cuda0(), ws, false, expect(4, true)));
  // head_dim 256: blocks of 4 KV heads, so 8 heads make two parts.
  FP_CASE(run_decode(rng, {uniform(sms / 2, 250), 16, 16, 8, 256, KvLayout::NHD, DType::bf16, 100, 30.0f},
                     cuda0(), ws, false, expect(2, true)));
  // With the combine, 8 KV heads: parts of 4 (P = 2) or 2 (P = 4) heads keep 8 warps a block
  // (2 or 4 per head, their states combined in the block); uncut, nothing merged. Without,
  // one part (cut rows).
  FP_CASE(run_decode(rng, {uniform(sms / 2, 300), 16, 32, 8, 128, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(2, true, true)));
  FP_CASE(run_decode(rng, {uniform(sms / 4, 333), 16, 64, 8, 128, KvLayout::HND, DType::f16, 200},
                     cuda0(), ws, false, expect(4, true, true)));
  // Parts of one head (P = 8) on 8 warps, 8 per head: 128 uncut rows on 132 SMs. With
  // FLASHPAGE_DECODE_ONE_HEAD_WIDE=0, the same rows cut and merged.
  FP_CASE(run_decode(rng, {uniform(sms / 8, 700), 16, 32, 8, 128, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(8, true, true, true)));
  FP_CASE(run_decode(rng, {uniform(sms / 8, 515), 16, 64, 8, 128, KvLayout::HND, DType::f16, 300},
                     cuda0(), ws, false, expect(8, true, true, true)));
  // The same parts on rows of unequal lengths: cut, each piece's combined state one partial.
  FP_CASE(run_decode(rng, {ragged(sms / 2, 2000), 16, 32, 8, 128, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(2, false, true)));
  // head_dim 256, 2 KV heads: with the combine, parts of one head on 4 warps (4 per head).
  FP_CASE(run_decode(rng, {uniform(sms / 2, 260), 16, 16, 2, 256, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(2, true, true)));
  // Page 1 (single-token boxes): no parts, cut rows. Parts of one head would halve the
  // copies to 512 B, and page 1 is bound by their count: measured 14-23% longer on an H100
  // (bench/NOTES.md, session 38).
  FP_CASE(run_decode(rng, {uniform(sms / 2, 260), 1, 16, 2, 256, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(1, false)));
  FP_CASE(run_decode(rng, {uniform(sms / 2, 190), 1, 32, 2, 256, KvLayout::HND, DType::f16, 150},
                     cuda0(), ws, false, expect(1, false)));
  // As many rows as SMs: one part, uncut; two KV heads (warps sharing each head: merged
  // unless they combine in the block).
  FP_CASE(run_decode(rng, {uniform(sms, 200), 16, 32, 8, 128, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(1, true)));
  FP_CASE(run_decode(rng, {uniform(sms, 100), 16, 8, 2, 128, KvLayout::NHD, DType::bf16},
                     cuda0(), ws, false, expect(1, combine)));
}

// Steps of 100K+ tokens (block shares of ~1000-1800 tokens): every block runs pieces of
// several long rows, mixed with short and empty rows, or packs dozens of short rows.
TEST(Decode, CudaLargeBatches) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  FP_CASE(run_decode(rng, {{60000, 60000, 60000, 60000}, 16, 8, 1, 64, KvLayout::NHD, DType::bf16},
                     cuda0(), Workspace::kDefaultBytes, true));
  FP_CASE(run_decode(rng, {{30000, 5, 0, 70000, 1, 20000, 17}, 1, 16, 2, 64, KvLayout::HND,
                           DType::f16, -1, 25.0f},
                     cuda0(), Workspace::kDefaultBytes, true));
  std::vector<int64_t> many(2000);
  for (auto& len : many) len = rng.integer(0, 100);
  FP_CASE(run_decode(rng, {many, 8, 32, 8, 64, KvLayout::NHD, DType::bf16}, cuda0()));
}

// Pages that start 8 bytes off a 16-byte boundary (a view 4 elements into a buffer): the
// tensor-core kernels' 16-byte K/V copies cannot take them, so the call runs on the generic
// kernel (the streamed kernel and, under FLASHPAGE_DECODE_KERNEL=split, the split one).
TEST(Decode, CudaUnalignedPages) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const PagedCase pc =
      random_paged(rng, {0, 5, 300, 2000}, 16, 2, 128, KvLayout::NHD, DType::bf16, cuda0());
  auto unaligned = [](const Tensor& pages) {
    Tensor buffer = Tensor::empty({pages.numel() + 4}, pages.dtype(), pages.device());
    Tensor view = buffer.slice(0, 4, 4 + pages.numel()).view(pages.shape());
    view.copy_(pages);
    return view;
  };
  PagedKv kv = pc.kv;
  kv.k_pages = unaligned(pc.kv.k_pages);
  kv.v_pages = unaligned(pc.kv.v_pages);
  const Tensor q = random_tensor(rng, {4, 8, 128}, DType::bf16, cuda0(), -2, 2);
  const oracle::Result ref = oracle::decode(q, pc.kv, {});
  Workspace ws(cuda0());
  const Plan plan = plan_decode(ws, pc.host_table, kv, 8);
  Tensor out = poisoned({4, 8, 128}, DType::bf16, cuda0());
  Tensor lse = poisoned({4, 8}, DType::f32, cuda0());
  batch_decode(ws, plan, q, kv, {}, out, lse);
  expect_output(out, ref.out, DType::bf16);
  expect_lse(lse, ref.lse, DType::bf16);
}

TEST(Decode, CudaRandomSweep) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 40 * test_scale(); ++i)
    FP_CASE(run_decode(rng,
               random_case(rng, {1, 3, 16, 64, 256}, {64, 128, 256}, 16,
                           rng.coin(0.5) ? DType::bf16 : DType::f16, 1000),
               cuda0()));
}

}  // namespace
}  // namespace fpt
