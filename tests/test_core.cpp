// Core types: DType conversions and names, Device, Tensor views and copies.
#include <cstring>

#include "core/unit_strides.h"
#include "test_util.h"

namespace fpt {
namespace {

TEST(DTypeTest, NamesRoundTrip) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::f8e5m2, DType::i32,
                  DType::i64, DType::boolean})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  EXPECT_EQ(parse_dtype("BFloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("half"), DType::f16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
}

TEST(DTypeTest, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f)), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(-2.5f)), -2.5f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even one (1).
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(0x1p-24f)), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-12f)), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DTypeTest, Fp8Saturates) {
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1000.0f)), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(-1.5f)), -1.5f);
  EXPECT_EQ(f8e5m2_to_f32(f32_to_f8e5m2(1e6f)), 57344.0f);
  EXPECT_EQ(f8e5m2_to_f32(f32_to_f8e5m2(0.5f)), 0.5f);
}

TEST(DeviceTest, Parse) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("CUDA"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(parse_layout("NHD"), KvLayout::NHD);
  EXPECT_EQ(parse_layout("hnd"), KvLayout::HND);
  EXPECT_EQ(parse_layout(layout_name(KvLayout::HND)), KvLayout::HND);
  if (!cuda_built()) {
    EXPECT_FALSE(cuda_available());
  }
  EXPECT_EQ(default_device(), cuda_available() ? Device::cuda(0) : Device::cpu());
}

TEST(TensorTest, ViewsShareStorage) {
  FP_SEEDED_RNG(rng);
  Tensor t = random_tensor(rng, {2, 3, 4}, DType::f32, Device::cpu());
  EXPECT_TRUE(t.defined());
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  const Tensor tr = t.transpose(0, 2);
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_FALSE(tr.is_contiguous());
  const Tensor c = tr.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  const oracle::Dense dt = oracle::dense(t), dc = oracle::dense(c);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t x = 0; x < 4; ++x) EXPECT_EQ(dt.at({a, b, x}), dc.at({x, b, a}));
  const Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(oracle::dense(s).at({1, 0, 2}), dt.at({1, 1, 2}));
  Tensor sel = t.select(0, 1);
  EXPECT_EQ(sel.shape(), (Shape{3, 4}));
  EXPECT_EQ(oracle::dense(sel).at({2, 3}), dt.at({1, 2, 3}));
  EXPECT_EQ(t.view({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_EQ(t.size(-1), 4);
  sel.fill_(7.0);  // a view writes through
  EXPECT_EQ(oracle::dense(t).at({1, 0, 0}), 7.0);
  EXPECT_EQ(oracle::dense(t).at({0, 0, 0}), dt.at({0, 0, 0}));
}

// Size-1 dims' strides are free; natural_unit_strides gives them a contiguous layout's (so
// the CUDA kernels' alignment tests pass) and leaves every element where it is.
TEST(TensorTest, NaturalUnitStridesKeepTheElements) {
  FP_SEEDED_RNG(rng);
  const Tensor base = random_tensor(rng, {4, 8}, DType::f32, Device::cpu());
  // As DLPack exporters often write them: 1 for every size-1 dim.
  const Tensor odd = base.as_strided({1, 4, 1, 8}, {1, 8, 1, 1});
  const Tensor n = detail::natural_unit_strides(odd);
  EXPECT_EQ(n.shape(), odd.shape());
  EXPECT_EQ(n.strides(), (Shape{32, 8, 8, 1}));
  EXPECT_EQ(n.data(), odd.data());
  const oracle::Dense a = oracle::dense(odd), b = oracle::dense(n);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(b.at({0, i, 0, j}), a.at({0, i, 0, j}));
  // Dims of other sizes keep their strides, odd or not; a size-1 last dim gets 1.
  EXPECT_EQ(detail::natural_unit_strides(base.as_strided({2, 1, 3}, {9, 5, 2})).strides(),
            (Shape{9, 6, 2}));
  EXPECT_EQ(detail::natural_unit_strides(base.as_strided({4, 1}, {8, 3})).strides(),
            (Shape{8, 1}));
  EXPECT_EQ(detail::natural_unit_strides(base).strides(), (Shape{8, 1}));
  EXPECT_FALSE(detail::natural_unit_strides(Tensor()).defined());
}

TEST(TensorTest, DTypeConversionAndCopy) {
  FP_SEEDED_RNG(rng);
  const Tensor t = random_tensor(rng, {5, 7}, DType::f32, Device::cpu());
  const Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  const oracle::Dense dt = oracle::dense(t), db = oracle::dense(b);
  for (size_t i = 0; i < dt.v.size(); ++i)
    EXPECT_EQ(db.v[i], double(bf16_to_f32(f32_to_bf16(float(dt.v[i])))));
  Tensor dst = Tensor::zeros({7, 5}, DType::f16);
  dst.copy_(t.transpose(0, 1));
  EXPECT_EQ(oracle::dense(dst).at({3, 2}), double(f16_to_f32(f32_to_f16(float(dt.at({2, 3}))))));
  const Tensor cl = t.clone();
  EXPECT_NE(cl.data(), t.data());
  EXPECT_EQ(std::memcmp(cl.data(), t.data(), t.nbytes()), 0);
  Tensor z = Tensor::zeros({3}, DType::i32);
  EXPECT_EQ(oracle::ints(z), (std::vector<int64_t>{0, 0, 0}));
  Tensor n = poisoned({4}, DType::bf16, Device::cpu());
  EXPECT_EQ(count_nan(n), 4);
}

TEST(TensorTest, CudaRoundTrip) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const Tensor t = random_tensor(rng, {3, 5, 8}, DType::bf16, Device::cpu());
  const Tensor g = t.to(cuda0());
  EXPECT_EQ(g.device(), cuda0());
  const Tensor back = g.to(Device::cpu());
  EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0);
  Tensor p = poisoned({3, 5, 8}, DType::f16, cuda0());
  EXPECT_EQ(count_nan(p), 120);
  p.copy_(t);  // converting copy host bf16 -> device f16
  EXPECT_EQ(count_nan(p), 0);
}

}  // namespace
}  // namespace fpt
