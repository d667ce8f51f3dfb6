// sdpa: contiguous attention with PyTorch's semantics (top-left causal, broadcast bool /
// additive masks, GQA), against the float64 oracle.
#include "test_util.h"

namespace fpt {
namespace {

enum class MaskKind { none, boolean, additive };

struct SdpaCase {
  int64_t B, Hq, Hkv, S, L, D;
  DType dtype = DType::f32;
  bool causal = false;
  MaskKind mask = MaskKind::none;
  Shape mask_shape;  // broadcastable to [B, Hq, S, L]
  int window_left = -1;
  float soft_cap = 0;
  float scale = 0;

  std::string str() const {
    std::ostringstream os;
    os << "B=" << B << " Hq=" << Hq << " Hkv=" << Hkv << " S=" << S << " L=" << L << " D=" << D
       << " " << dtype_name(dtype) << " causal=" << causal << " mask=" << int(mask)
       << shape_to_string(mask_shape) << " window=" << window_left << " cap=" << soft_cap
       << " scale=" << scale;
    return os.str();
  }
};

// Bool masks keep ~75% (and some rows nothing); additive ones mix finite values and -inf.
Tensor random_mask(Rng& rng, MaskKind kind, const Shape& shape, Device device) {
  Tensor h = Tensor::empty(shape, kind == MaskKind::boolean ? DType::boolean : DType::f32);
  const bool drop_row = rng.coin(0.5);
  const int64_t last = shape.empty() ? 1 : shape.back();
  for (int64_t i = 0; i < h.numel(); ++i) {
    const bool row0 = drop_row && i < last;  // the mask's first row drops everything
    if (kind == MaskKind::boolean)
      h.data_as<uint8_t>()[i] = !row0 && rng.coin(0.75);
    else
      h.data_as<float>()[i] =
          row0 || rng.coin(0.2) ? -INFINITY : float(rng.uniform(-3.0, 1.0));
  }
  return h.to(device);
}

void run_sdpa(Rng& rng, const SdpaCase& c, Device device) {
  SCOPED_TRACE(c.str() + " on " + device.str());
  const Tensor q = random_tensor(rng, {c.B, c.Hq, c.S, c.D}, c.dtype, device, -2, 2);
  const Tensor k = random_tensor(rng, {c.B, c.Hkv, c.L, c.D}, c.dtype, device, -2, 2);
  const Tensor v = random_tensor(rng, {c.B, c.Hkv, c.L, c.D}, c.dtype, device);
  const Tensor mask = c.mask == MaskKind::none ? Tensor() : random_mask(rng, c.mask, c.mask_shape, device);
  AttentionParams p{c.scale, c.causal, c.window_left, c.soft_cap};
  const oracle::Result ref = oracle::sdpa(q, k, v, mask, p);

  Tensor out = poisoned({c.B, c.Hq, c.S, c.D}, c.dtype, device);
  Tensor lse = poisoned({c.B, c.Hq, c.S}, DType::f32, device);
  sdpa(q, k, v, mask, p, out, lse);
  expect_output(out, ref.out, c.dtype);
  expect_lse(lse, ref.lse, c.dtype);

  // The allocating form gives the same answer.
  Tensor lse2;
  const Tensor out2 = sdpa(q, k, v, mask, p, &lse2);
  EXPECT_EQ(out2.device(), device);
  EXPECT_EQ(out2.dtype(), c.dtype);
  expect_output(out2, ref.out, c.dtype, "out (allocating form)");
  expect_lse(lse2, ref.lse, c.dtype);
}

std::vector<SdpaCase> fixed_cases(DType dtype) {
  std::vector<SdpaCase> v{
      {1, 1, 1, 1, 1, 64, dtype},
      {2, 4, 4, 7, 7, 64, dtype, true},                // MHA, top-left causal, S == L
      {2, 8, 2, 5, 113, 128, dtype, true},             // S < L: top-left (query i sees j <= i)
      {1, 4, 1, 9, 4, 64, dtype, true},                // S > L
      {3, 6, 3, 4, 17, 40, dtype},                     // odd head_dim
      {2, 2, 1, 3, 5, 8, dtype},                       // smallest head_dim
      {2, 4, 2, 6, 10, 64, dtype, false, MaskKind::boolean, {6, 10}},
      {2, 4, 2, 6, 10, 64, dtype, false, MaskKind::boolean, {2, 1, 6, 10}},
      {2, 4, 2, 6, 10, 64, dtype, false, MaskKind::boolean, {2, 4, 6, 10}},
      {2, 4, 2, 6, 10, 64, dtype, false, MaskKind::boolean, {2, 1, 1, 10}},  // padding mask
      {2, 4, 2, 6, 10, 64, dtype, false, MaskKind::additive, {6, 10}},
      {2, 4, 2, 6, 10, 64, dtype, false, MaskKind::additive, {1, 4, 6, 10}},
      {2, 4, 2, 6, 10, 64, dtype, false, MaskKind::additive, {2, 4, 6, 10}},
      {2, 8, 1, 12, 12, 64, dtype, true, MaskKind::none, {}, 3},             // window
      {2, 8, 8, 5, 20, 64, dtype, false, MaskKind::none, {}, 4},             // window, no causal
      {2, 4, 2, 7, 30, 64, dtype, true, MaskKind::none, {}, -1, 5.0f, 1.0f}, // soft cap
      {1, 4, 4, 8, 8, 64, dtype, false, MaskKind::none, {}, -1, 0, 0.3f},    // explicit scale
      {1, 2, 1, 3, 0, 64, dtype},                                            // no keys at all
  };
  return v;
}

TEST(Sdpa, CpuFixedCasesF32) {
  FP_SEEDED_RNG(rng);
  for (const auto& c : fixed_cases(DType::f32)) FP_CASE(run_sdpa(rng, c, Device::cpu()));
}

// PyTorch broadcasts a mask of any rank <= 4, right-aligned: [L] is a key-padding row.
TEST(Sdpa, CpuRank1MaskBroadcasts) {
  FP_SEEDED_RNG(rng);
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 64, DType::f32, false, MaskKind::additive, {10}}, Device::cpu()));
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 64, DType::f32, false, MaskKind::boolean, {10}}, Device::cpu()));
  // Size-1 key dims broadcast over the keys too: one value per query row (or for all).
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 64, DType::f32, false, MaskKind::additive, {6, 1}}, Device::cpu()));
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 64, DType::f32, false, MaskKind::additive, {1}}, Device::cpu()));
}

// The same on CUDA (a [L] mask reaches the kernels as [1, L]; size-1 key dims read with
// stride 0).
TEST(Sdpa, CudaRank1MaskBroadcasts) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 64, DType::bf16, false, MaskKind::additive, {10}}, cuda0()));
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 128, DType::f16, false, MaskKind::boolean, {10}}, cuda0()));
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 64, DType::bf16, false, MaskKind::additive, {6, 1}}, cuda0()));
  FP_CASE(run_sdpa(rng, {2, 4, 2, 6, 10, 64, DType::bf16, false, MaskKind::additive, {1}}, cuda0()));
}

TEST(Sdpa, CpuHalfPrecision) {
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::f16, DType::bf16}) {
    FP_CASE(run_sdpa(rng, {2, 8, 2, 5, 33, 64, t, true}, Device::cpu()));
    FP_CASE(run_sdpa(rng, {1, 4, 4, 6, 6, 128, t, false, MaskKind::boolean, {1, 6}}, Device::cpu()));
  }
}

SdpaCase random_case(Rng& rng, DType dtype, const std::vector<int64_t>& head_dims, int64_t max_group) {
  SdpaCase c;
  c.B = rng.integer(1, 4);
  c.Hkv = rng.integer(1, 3);
  c.Hq = c.Hkv * rng.integer(1, max_group);
  c.S = rng.integer(1, 24);
  c.L = rng.coin(0.2) ? c.S : rng.integer(1, 80);
  c.D = rng.pick(head_dims);
  c.dtype = dtype;
  const int64_t m = rng.integer(0, 2);
  c.mask = MaskKind(m);
  if (c.mask != MaskKind::none) {
    const std::vector<Shape> shapes{{c.S, c.L},         {c.B, 1, c.S, c.L}, {c.B, c.Hq, c.S, c.L},
                                    {1, c.Hq, 1, c.L},  {c.B, 1, 1, c.L},   {1, c.L}};
    c.mask_shape = rng.pick(shapes);
  } else {
    c.causal = rng.coin(0.5);
  }
  if (rng.coin(0.3)) c.window_left = int(rng.integer(0, 20));
  if (rng.coin(0.3)) c.soft_cap = float(rng.uniform(1.0, 30.0));
  return c;
}

TEST(Sdpa, CpuRandomSweep) {
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 25 * test_scale(); ++i)
    FP_CASE(run_sdpa(rng, random_case(rng, DType::f32, {8, 16, 40, 64, 128}, 8), Device::cpu()));
}

TEST(Sdpa, CudaFixedCases) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16}) {
    for (const auto& c : fixed_cases(t)) FP_CASE(run_sdpa(rng, c, cuda0()));
    for (int64_t d : {64, 128, 256}) FP_CASE(run_sdpa(rng, {2, 16, 1, 9, 300, d, t, true}, cuda0()));
  }
}

TEST(Sdpa, CudaRandomSweep) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 40 * test_scale(); ++i)
    FP_CASE(run_sdpa(rng, random_case(rng, rng.coin(0.5) ? DType::bf16 : DType::f16, {64, 128, 256}, 16),
             cuda0()));
}

}  // namespace
}  // namespace fpt
