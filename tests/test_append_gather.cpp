// append_paged_kv then gather_paged_kv round-trips exactly; appends touch nothing but the
// addressed slots.
#include <cstring>

#include "test_util.h"

namespace fpt {
namespace {

// Bitwise comparison of two tensors of one dtype (NaN poison compares equal to itself).
int64_t count_bit_differences(const Tensor& a, const Tensor& b) {
  const Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  EXPECT_EQ(ha.shape(), hb.shape());
  EXPECT_EQ(ha.dtype(), hb.dtype());
  const size_t es = dtype_size(ha.dtype());
  int64_t diff = 0;
  for (int64_t i = 0; i < ha.numel(); ++i)
    diff += std::memcmp(static_cast<const char*>(ha.data()) + i * es,
                        static_cast<const char*>(hb.data()) + i * es, es) != 0;
  return diff;
}

struct AppendCase {
  std::vector<int64_t> lengths;
  int64_t page_size, Hkv, D;
  KvLayout layout;
  DType dtype;
  bool batched_input;  // k as [B, S, Hkv, D] (uniform lengths) instead of [N, Hkv, D]
  bool strided_input;  // k a non-contiguous view
};

void run_append_gather(Rng& rng, const AppendCase& c, Device device) {
  SCOPED_TRACE("lengths=" + str(c.lengths) + " P=" + std::to_string(c.page_size) +
               " Hkv=" + std::to_string(c.Hkv) + " D=" + std::to_string(c.D) + " " +
               std::string(layout_name(c.layout)) + " " + std::string(dtype_name(c.dtype)) +
               " batched=" + std::to_string(c.batched_input) +
               " strided=" + std::to_string(c.strided_input) + " on " + device.str());
  const int64_t B = int64_t(c.lengths.size());
  int64_t N = 0;
  for (int64_t len : c.lengths) N += len;
  const int64_t num_pages = pages_needed(c.lengths, c.page_size) + 3;
  PagedKv kv;
  kv.layout = c.layout;
  const PageTable host_table = random_table(rng, c.lengths, c.page_size, num_pages);
  kv.table = host_table.to(device);
  const Shape pshape = page_shape(num_pages, c.page_size, c.Hkv, c.D, c.layout);
  kv.k_pages = poisoned(pshape, c.dtype, device);
  kv.v_pages = poisoned(pshape, c.dtype, device);

  // Tokens in row-major (row, position) order; appended in a shuffled order.
  std::vector<int64_t> rows, positions;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < c.lengths[size_t(b)]; ++t) {
      rows.push_back(b);
      positions.push_back(t);
    }
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), 0);
  if (!c.batched_input) std::shuffle(order.begin(), order.end(), rng.gen);
  std::vector<int64_t> app_rows, app_pos;
  for (int64_t i : order) {
    app_rows.push_back(rows[size_t(i)]);
    app_pos.push_back(positions[size_t(i)]);
  }
  // The reference tokens, [N, Hkv, D], in row-major (row, position) order.
  const Tensor ref_k = random_tensor(rng, {N, c.Hkv, c.D}, c.dtype, Device::cpu());
  const Tensor ref_v = random_tensor(rng, {N, c.Hkv, c.D}, c.dtype, Device::cpu());
  Tensor in_k = Tensor::empty({N, c.Hkv, c.D}, c.dtype), in_v = in_k.clone();
  for (int64_t n = 0; n < N; ++n) {
    in_k.select(0, n).copy_(ref_k.select(0, order[size_t(n)]));
    in_v.select(0, n).copy_(ref_v.select(0, order[size_t(n)]));
  }
  Tensor k_arg = in_k.to(device), v_arg = in_v.to(device);
  if (c.batched_input) {
    k_arg = k_arg.view({B, N / B, c.Hkv, c.D});
    v_arg = v_arg.view({B, N / B, c.Hkv, c.D});
  }
  if (c.strided_input) {
    // The same values inside a wider buffer: dim 0 of k/v has a stride of two tokens.
    Shape wide = k_arg.shape();
    wide[0] *= 2;
    Tensor wk = poisoned(wide, c.dtype, Device::cpu()), wv = poisoned(wide, c.dtype, Device::cpu());
    Tensor wk_dev = wk.to(device), wv_dev = wv.to(device);
    const Shape shape = k_arg.shape();
    Shape strides = wk_dev.strides();
    strides[0] *= 2;
    Tensor sk = Tensor::from_blob(wk_dev.data(), shape, c.dtype, device, strides);
    Tensor sv = Tensor::from_blob(wv_dev.data(), shape, c.dtype, device, strides);
    // Fill through a host image (strided CUDA copies are not supported by copy_).
    Tensor hk = wk, hv = wv;
    Tensor hks = Tensor::from_blob(hk.data(), shape, c.dtype, Device::cpu(), strides);
    Tensor hvs = Tensor::from_blob(hv.data(), shape, c.dtype, Device::cpu(), strides);
    hks.copy_(k_arg.to(Device::cpu()));
    hvs.copy_(v_arg.to(Device::cpu()));
    wk_dev.copy_(hk);
    wv_dev.copy_(hv);
    if (shape[0] > 1) {
      ASSERT_FALSE(sk.is_contiguous());
    }
    append_paged_kv(sk, sv, host_ints(app_rows).to(device), host_ints(app_pos).to(device), kv);
  } else {
    append_paged_kv(k_arg, v_arg, host_ints(app_rows).to(device), host_ints(app_pos).to(device), kv);
  }

  // Every addressed slot holds its token (read through the oracle's page addressing) ...
  const oracle::Rows got = oracle::paged_rows(kv);
  const oracle::Dense rk = oracle::dense(ref_k), rv = oracle::dense(ref_v);
  int64_t wrong = 0, n = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < c.lengths[size_t(b)]; ++t, ++n)
      for (int64_t h = 0; h < c.Hkv; ++h)
        for (int64_t x = 0; x < c.D; ++x) {
          wrong += got.key(b, t, h)[x] != rk.at({n, h, x});
          wrong += got.value(b, t, h)[x] != rv.at({n, h, x});
        }
  EXPECT_EQ(wrong, 0) << "appended values differ";
  // ... and nothing else changed: the number of non-NaN elements is exactly the tokens written.
  const int64_t written = kv.k_pages.numel() - count_nan(kv.k_pages);
  EXPECT_EQ(written, N * c.Hkv * c.D) << "append wrote outside the addressed slots";
  EXPECT_EQ(kv.v_pages.numel() - count_nan(kv.v_pages), N * c.Hkv * c.D);

  // gather: row after row, bit-exact.
  Tensor k_out = poisoned({N, c.Hkv, c.D}, c.dtype, device);
  Tensor v_out = poisoned({N, c.Hkv, c.D}, c.dtype, device);
  gather_paged_kv(kv, k_out, v_out);
  EXPECT_EQ(count_bit_differences(k_out, ref_k), 0) << "gathered k";
  EXPECT_EQ(count_bit_differences(v_out, ref_v), 0) << "gathered v";
}

TEST(AppendGather, CpuRoundTrip) {
  FP_SEEDED_RNG(rng);
  const std::vector<AppendCase> cases{
      {{1}, 1, 1, 8, KvLayout::NHD, DType::f32, false, false},
      {{0, 16, 17, 1, 113}, 16, 2, 64, KvLayout::NHD, DType::f32, false, false},
      {{0, 16, 17, 1, 113}, 16, 2, 64, KvLayout::HND, DType::f32, false, false},
      {{5, 9, 3}, 3, 4, 40, KvLayout::HND, DType::bf16, false, false},
      {{7, 7}, 1, 2, 64, KvLayout::NHD, DType::f16, true, false},
      {{6, 6, 6}, 64, 2, 64, KvLayout::HND, DType::f32, true, true},
      {{20, 3}, 16, 3, 128, KvLayout::NHD, DType::bf16, false, true},
  };
  for (const auto& c : cases) FP_CASE(run_append_gather(rng, c, Device::cpu()));
}

TEST(AppendGather, CpuRandomSweep) {
  FP_SEEDED_RNG(rng);
  for (int i = 0; i < 15 * test_scale(); ++i) {
    AppendCase c;
    c.page_size = rng.pick(std::vector<int64_t>{1, 3, 16, 64});
    c.lengths = interesting_lengths(rng, c.page_size, rng.integer(1, 6), 150);
    c.Hkv = rng.integer(1, 4);
    c.D = rng.pick(std::vector<int64_t>{8, 40, 64, 128});
    c.layout = rng.coin(0.5) ? KvLayout::NHD : KvLayout::HND;
    c.dtype = rng.pick(std::vector<DType>{DType::f32, DType::f16, DType::bf16});
    c.batched_input = false;
    c.strided_input = rng.coin(0.3);
    FP_CASE(run_append_gather(rng, c, Device::cpu()));
  }
}

TEST(AppendGather, CudaRoundTrip) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128, 256})
      for (int64_t ps : {1, 16, 256}) {
        FP_CASE(run_append_gather(rng, {{0, 1, ps, ps + 1, 300}, ps, 4, d, KvLayout::NHD, t, false, false}, cuda0()));
        FP_CASE(run_append_gather(rng, {{0, 1, ps, ps + 1, 300}, ps, 2, d, KvLayout::HND, t, false, false}, cuda0()));
        FP_CASE(run_append_gather(rng, {{33, 33}, ps, 2, d, KvLayout::NHD, t, true, true}, cuda0()));
      }
}

// On CUDA the table's device values are never read back on the host, so the kernel itself
// must refuse a token outside its row's pages and a table whose page ids or indptr leave the
// pool: such tokens write nothing. The pages are the middle of a larger buffer, so a stray
// write lands on a canary page and shows up as a bit difference.
TEST(AppendGather, CudaBadTableValuesWriteNothing) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const int64_t page = 4, hkv = 2, d = 64, pages = 3;
  const Tensor k_buf = random_tensor(rng, {pages + 2, page, hkv, d}, DType::bf16, cuda0());
  const Tensor v_buf = random_tensor(rng, {pages + 2, page, hkv, d}, DType::bf16, cuda0());
  Tensor k_want = k_buf.to(Device::cpu()), v_want = v_buf.to(Device::cpu());
  PagedKv kv;
  kv.k_pages = k_buf.slice(0, 1, pages + 1);
  kv.v_pages = v_buf.slice(0, 1, pages + 1);
  kv.layout = KvLayout::NHD;
  // Row 0 is good (page 1); row 1 names page 3 (one past the pool), row 2 page -1, and row
  // 3's indptr range [3, 6) runs past the 4 entries of indices.
  kv.table = PageTable{host_ints({0, 1, 2, 3, 6}), host_ints({1, 3, -1, 0}),
                       host_ints({page, page, page, page})}
                 .to(cuda0());
  const std::vector<int64_t> rows{0, 0, 1, 2, 3, 7, 0}, positions{1, 4, 0, 2, 0, 0, -1};
  const int64_t n = int64_t(rows.size());
  const Tensor k = random_tensor(rng, {n, hkv, d}, DType::bf16, cuda0());
  const Tensor v = random_tensor(rng, {n, hkv, d}, DType::bf16, cuda0());
  append_paged_kv(k, v, host_ints(rows).to(cuda0()), host_ints(positions).to(cuda0()), kv);
  // Only token 0 lands: row 0's page is page 1 of the view, buffer page 2, slot 1.
  k_want.select(0, 2).select(0, 1).copy_(k.select(0, 0));
  v_want.select(0, 2).select(0, 1).copy_(v.select(0, 0));
  EXPECT_EQ(count_bit_differences(k_buf, k_want), 0) << "k pages";
  EXPECT_EQ(count_bit_differences(v_buf, v_want), 0) << "v pages";
}

}  // namespace
}  // namespace fpt
