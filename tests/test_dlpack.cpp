// DLPack interop: exports describe the tensor exactly (pointer, shape, strides, dtype,
// device) and keep its memory alive until the consumer's deleter call; imports view the
// producer's memory without a copy, honour strides and byte_offset, call the producer's
// deleter exactly once when the last view goes, and refuse what they cannot address with an
// Error while leaving the producer's ownership alone.
#include <dlpack/dlpack.h>

#include <cstring>

#include "test_util.h"

namespace fpt {
namespace {

// A producer: a DLManagedTensor over a host buffer that counts its deleter's calls.
struct Producer {
  std::vector<float> buffer;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
  int deleted = 0;

  Producer(std::vector<float> values, std::vector<int64_t> shape_in,
           std::vector<int64_t> strides_in, uint64_t byte_offset = 0)
      : buffer(std::move(values)), shape(std::move(shape_in)), strides(std::move(strides_in)) {
    DLTensor& t = managed.dl_tensor;
    t.data = buffer.data();
    t.device = {kDLCPU, 0};
    t.ndim = int(shape.size());
    t.dtype = {uint8_t(kDLFloat), 32, 1};
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = byte_offset;
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* self) {
      ++static_cast<Producer*>(self->manager_ctx)->deleted;
    };
  }
};

TEST(DLPack, ExportDescribesTheTensorAndKeepsItAlive) {
  FP_SEEDED_RNG(rng);
  const Tensor base = random_tensor(rng, {3, 4, 5}, DType::f32, Device::cpu());
  const Tensor view = base.transpose(0, 2).slice(1, 1, 3);  // [5, 2, 3], strided
  DLManagedTensor* m = to_dlpack(view);
  const DLTensor& d = m->dl_tensor;
  EXPECT_EQ(d.data, view.data());
  EXPECT_EQ(d.byte_offset, 0u);
  EXPECT_EQ(d.device.device_type, kDLCPU);
  EXPECT_EQ(d.dtype.code, kDLFloat);
  EXPECT_EQ(d.dtype.bits, 32);
  EXPECT_EQ(d.dtype.lanes, 1);
  ASSERT_EQ(d.ndim, 3);
  EXPECT_EQ(Shape(d.shape, d.shape + 3), view.shape());
  EXPECT_EQ(Shape(d.strides, d.strides + 3), view.strides());
  // The export holds the memory: the values stay readable after every tensor here is gone.
  std::vector<float> want(size_t(view.numel()));
  const Tensor dense = view.contiguous();
  std::memcpy(want.data(), dense.data(), want.size() * sizeof(float));
  {
    Tensor drop = base;
    (void)drop;
  }
  const Tensor back = from_dlpack(m);  // takes over the export
  EXPECT_EQ(back.data(), view.data());
  EXPECT_EQ(back.shape(), view.shape());
  EXPECT_EQ(back.strides(), view.strides());
  const Tensor back_dense = back.contiguous();
  EXPECT_EQ(std::memcmp(back_dense.data(), want.data(), want.size() * sizeof(float)), 0);
}

TEST(DLPack, ImportViewsStridesAndOffsetAndCallsTheDeleterOnce) {
  // Column-major [3, 2] starting two floats into the buffer: element (i, j) = buf[2 + i + 3j].
  Producer p({0, 0, 10, 11, 12, 20, 21, 22}, {3, 2}, {1, 3}, 2 * sizeof(float));
  {
    const Tensor t = from_dlpack(&p.managed);
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_EQ(t.dtype(), DType::f32);
    EXPECT_EQ(t.data(), p.buffer.data() + 2);
    const Tensor c = t.contiguous();
    const float* v = c.data_as<float>();
    EXPECT_EQ(std::vector<float>(v, v + 6), (std::vector<float>{10, 20, 11, 21, 12, 22}));
    Tensor copy = t.slice(0, 1, 3);  // a view keeps the import alive
    EXPECT_EQ(p.deleted, 0);
    (void)copy;
  }
  EXPECT_EQ(p.deleted, 1);

  // No strides: contiguous. An op runs on the import like on any tensor.
  std::vector<float> values(16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * float(i % 5) - 0.5f;
  Producer q(values, {1, 1, 2, 8}, {});
  {
    const Tensor t = from_dlpack(&q.managed);
    EXPECT_EQ(t.strides(), contiguous_strides({1, 1, 2, 8}));
    Tensor out = poisoned({1, 1, 2, 8}, DType::f32, Device::cpu());
    sdpa(t, t, t, Tensor(), {}, out);
    EXPECT_EQ(count_nan(out), 0);
  }
  EXPECT_EQ(q.deleted, 1);
}

TEST(DLPack, DtypesRoundTrip) {
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor src = random_tensor(rng, {2, 3}, DType::f32, Device::cpu(), 0, 5).to(t);
    const Tensor back = from_dlpack(to_dlpack(src));
    EXPECT_EQ(back.dtype(), t);
    EXPECT_EQ(back.data(), src.data());
    EXPECT_EQ(back.shape(), src.shape());
  }
}

TEST(DLPack, CudaHostMemoryIsACpuTensor) {
  Producer p({1, 2, 3}, {3}, {});
  p.managed.dl_tensor.device = {kDLCUDAHost, 0};
  EXPECT_EQ(from_dlpack(&p.managed).device(), Device::cpu());
  EXPECT_EQ(p.deleted, 1);
}

// Refused imports name the field and leave the producer's deleter uncalled (the caller
// still owns the struct, as the capsule protocol expects).
TEST(DLPack, RefusedImportsNameTheFieldAndKeepOwnership) {
  struct Bad {
    std::string name, field;
    std::function<void(DLTensor&)> edit;
  };
  const std::vector<Bad> cases{
      {"two lanes", "lanes", [](DLTensor& t) { t.dtype.lanes = 2; }},
      {"uint8", "dtype", [](DLTensor& t) { t.dtype = {uint8_t(kDLUInt), 8, 1}; }},
      {"float64", "dtype", [](DLTensor& t) { t.dtype = {uint8_t(kDLFloat), 64, 1}; }},
      {"OpenCL", "device_type", [](DLTensor& t) { t.device = {kDLOpenCL, 0}; }},
      {"negative device id", "device_id", [](DLTensor& t) { t.device = {kDLCUDA, -1}; }},
      {"negative stride", "strides", [](DLTensor& t) { t.strides[1] = -1; }},
      {"null shape", "shape", [](DLTensor& t) { t.shape = nullptr; }},
      {"negative ndim", "ndim", [](DLTensor& t) { t.ndim = -1; }},
      {"null data", "data", [](DLTensor& t) { t.data = nullptr; }},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    Producer p({1, 2, 3, 4, 5, 6}, {2, 3}, {3, 1});
    c.edit(p.managed.dl_tensor);
    try {
      (void)from_dlpack(&p.managed);
      ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.deleted, 0) << "a refused import called the producer's deleter";
  }
  EXPECT_THROW(from_dlpack(nullptr), Error);
  EXPECT_THROW(to_dlpack(Tensor()), Error);
  try {
    (void)to_dlpack(Tensor::zeros({2}, DType::f8e4m3));
    ADD_FAILURE() << "expected an Error for f8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f8"), std::string::npos) << e.what();
  }
}

TEST(DLPack, CudaRoundTrip) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const Tensor t = random_tensor(rng, {4, 8}, DType::bf16, cuda0());
  DLManagedTensor* m = to_dlpack(t.slice(1, 2, 6));
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 0);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLBfloat);
  const Tensor back = from_dlpack(m);
  EXPECT_EQ(back.device(), cuda0());
  EXPECT_EQ(back.data(), t.slice(1, 2, 6).data());
  EXPECT_EQ(back.strides(), t.slice(1, 2, 6).strides());
  EXPECT_EQ(oracle::dense(back).v, oracle::dense(t.slice(1, 2, 6)).v);  // a strided GPU view
}

}  // namespace
}  // namespace fpt
