// KvCachePool: page accounting, exhaustion leaving the pool unchanged, activation order,
// put + metadata + gather/decode reading back exactly what was put, metadata reused in place.
#include <map>
#include <set>

#include "test_util.h"

namespace fpt {
namespace {

KvCacheConfig small_config(Device device, DType dtype, KvLayout layout, int64_t num_pages = 12) {
  KvCacheConfig cfg;
  cfg.layers = 2;
  cfg.kv_heads = 2;
  // The CUDA kernels are built for head_dim 64/128/256; the CPU takes any multiple of 8.
  cfg.head_dim = device.is_cuda() ? 64 : 16;
  cfg.page_size = 4;
  cfg.num_pages = num_pages;
  cfg.dtype = dtype;
  cfg.device = device;
  cfg.layout = layout;
  return cfg;
}

// No page owned twice, every id in range, owned + free = num_pages.
void expect_invariants(const KvCachePool& pool, const std::vector<int64_t>& live) {
  std::set<int32_t> seen;
  int64_t owned = 0;
  for (int64_t id : live) {
    EXPECT_EQ(int64_t(pool.pages_of(id).size()),
              (pool.capacity(id) + pool.config().page_size - 1) / pool.config().page_size)
        << "request " << id;
    for (int32_t p : pool.pages_of(id)) {
      EXPECT_TRUE(p >= 0 && p < pool.config().num_pages) << "page id " << p;
      EXPECT_TRUE(seen.insert(p).second) << "page " << p << " owned twice";
      ++owned;
    }
  }
  EXPECT_EQ(owned + pool.free_pages(), pool.config().num_pages);
  EXPECT_EQ(pool.num_requests(), int64_t(live.size()));
}

TEST(Pool, BindUnbindAccounting) {
  KvCachePool pool(small_config(Device::cpu(), DType::f32, KvLayout::NHD));
  EXPECT_EQ(pool.free_pages(), 12);
  EXPECT_EQ(pool.num_requests(), 0);
  const int64_t a = pool.bind_request(10);  // ceil(10/4) = 3 pages
  EXPECT_EQ(pool.capacity(a), 10);
  EXPECT_EQ(pool.pages_of(a).size(), 3u);
  EXPECT_EQ(pool.free_pages(), 9);
  const int64_t b = pool.bind_request(4);  // exactly one page
  const int64_t c = pool.bind_request(1);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_EQ(pool.pages_of(b).size(), 1u);
  EXPECT_EQ(pool.pages_of(c).size(), 1u);
  EXPECT_EQ(pool.free_pages(), 7);
  expect_invariants(pool, {a, b, c});
  pool.unbind_request(a);
  EXPECT_EQ(pool.free_pages(), 10);
  expect_invariants(pool, {b, c});
  // The returned pages are reusable: the whole free list can be bound again.
  const int64_t d = pool.bind_request(40);
  EXPECT_EQ(pool.free_pages(), 0);
  expect_invariants(pool, {b, c, d});
  pool.unbind_request(b);
  pool.unbind_request(c);
  pool.unbind_request(d);
  EXPECT_EQ(pool.free_pages(), 12);
  expect_invariants(pool, {});
}

TEST(Pool, ExhaustionLeavesPoolUnchanged) {
  KvCachePool pool(small_config(Device::cpu(), DType::f32, KvLayout::NHD));
  const int64_t a = pool.bind_request(20);  // 5 pages
  const std::vector<int32_t> pages_a = pool.pages_of(a);
  EXPECT_THROW(pool.bind_request(29), KvCacheExhausted);  // 8 pages > 7 free
  EXPECT_EQ(pool.free_pages(), 7);
  EXPECT_EQ(pool.pages_of(a), pages_a);
  expect_invariants(pool, {a});
  const int64_t b = pool.bind_request(28);  // exactly the 7 left
  EXPECT_EQ(pool.free_pages(), 0);
  EXPECT_THROW(pool.bind_request(1), KvCacheExhausted);
  try {
    pool.bind_request(1);
  } catch (const Error& e) {  // KvCacheExhausted is a flashpage::Error
    SUCCEED() << e.what();
  }
  EXPECT_EQ(pool.pages_of(a), pages_a);
  expect_invariants(pool, {a, b});
}

TEST(Pool, BadArgumentsThrow) {
  KvCachePool pool(small_config(Device::cpu(), DType::f32, KvLayout::NHD));
  const int64_t a = pool.bind_request(8);
  EXPECT_THROW(pool.unbind_request(a + 100), Error);
  EXPECT_THROW(pool.pages_of(a + 100), Error);
  EXPECT_THROW(pool.capacity(-1), Error);
  // More than the whole pool (12 pages of 4) can never be bound: an Error, not an exhaustion
  // to retry; and capacities whose page count would overflow are caught before it.
  for (int64_t capacity : {int64_t(49), INT64_MAX, int64_t(-1)}) {
    try {
      pool.bind_request(capacity);
      ADD_FAILURE() << "bind_request(" << capacity << ") did not throw";
    } catch (const KvCacheExhausted&) {
      ADD_FAILURE() << "bind_request(" << capacity << ") threw KvCacheExhausted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bind_request: expected a capacity of 0..48"),
                std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(pool.activate(std::vector<int64_t>{a, a + 7}), Error);
  pool.unbind_request(a);
  EXPECT_THROW(pool.unbind_request(a), Error) << "double unbind";
  EXPECT_EQ(pool.free_pages(), 12);
  for (auto edit : std::vector<std::function<void(KvCacheConfig&)>>{
           [](KvCacheConfig& c) { c.head_dim = 12; },
           [](KvCacheConfig& c) { c.head_dim = 264; },
           [](KvCacheConfig& c) { c.page_size = 0; },
           [](KvCacheConfig& c) { c.kv_heads = 0; },
           [](KvCacheConfig& c) { c.layers = 0; },
           [](KvCacheConfig& c) { c.dtype = DType::i32; },
           // 2^24 pages x 256 x 2^24 heads x 256: the element count overflows int64.
           [](KvCacheConfig& c) {
             c.num_pages = int64_t(1) << 24;
             c.page_size = 256;
             c.kv_heads = int64_t(1) << 24;
             c.head_dim = 256;
           },
       }) {
    KvCacheConfig cfg = small_config(Device::cpu(), DType::f32, KvLayout::NHD);
    edit(cfg);
    EXPECT_THROW(KvCachePool{cfg}, Error);
  }
}

TEST(Pool, ActivateOrderAndCacheShape) {
  KvCachePool pool(small_config(Device::cpu(), DType::f32, KvLayout::HND));
  const int64_t a = pool.bind_request(5), b = pool.bind_request(6), c = pool.bind_request(7);
  pool.activate(std::vector<int64_t>{c, a, b});
  EXPECT_EQ(pool.active(), (std::vector<int64_t>{c, a, b}));
  pool.activate(std::vector<int64_t>{b});
  EXPECT_EQ(pool.active(), (std::vector<int64_t>{b}));
  EXPECT_EQ(pool.k_cache().shape(), (Shape{2, 12, 2, 4, 16}));  // HND
  KvCachePool nhd(small_config(Device::cpu(), DType::bf16, KvLayout::NHD));
  EXPECT_EQ(nhd.k_cache().shape(), (Shape{2, 12, 4, 2, 16}));
  EXPECT_EQ(nhd.v_cache().dtype(), DType::bf16);
}

// ---- put -> metadata -> gather/decode ------------------------------------------------------

// What the test put, per (layer, request): tokens [t][h][d] as doubles.
using HostCache = std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<double>>>;

// k/v [B, S, Hkv, D] written at per-row starts; mirrored into the host cache.
void put_and_mirror(Rng& rng, KvCachePool& pool, HostCache& hk, HostCache& hv, int64_t layer,
                    const std::vector<int64_t>& starts, int64_t S, bool uniform) {
  const auto& cfg = pool.config();
  const int64_t B = int64_t(pool.active().size()), H = cfg.kv_heads, D = cfg.head_dim;
  Tensor k = random_tensor(rng, {B, S, H, D}, cfg.dtype, cfg.device);
  Tensor v = random_tensor(rng, {B, S, H, D}, cfg.dtype, cfg.device);
  if (uniform)
    pool.put(layer, starts[0], k, v);
  else
    pool.put(layer, std::span<const int64_t>(starts), k, v);
  const oracle::Dense dk = oracle::dense(k), dv = oracle::dense(v);
  for (int64_t b = 0; b < B; ++b) {
    auto& rk = hk[{layer, pool.active()[size_t(b)]}];
    auto& rv = hv[{layer, pool.active()[size_t(b)]}];
    for (int64_t s = 0; s < S; ++s) {
      const size_t pos = size_t(starts[uniform ? 0 : size_t(b)] + s);
      if (rk.size() <= pos) rk.resize(pos + 1), rv.resize(pos + 1);
      rk[pos].assign(dk.v.begin() + dk.offset({b, s, 0, 0}), dk.v.begin() + dk.offset({b, s, 0, 0}) + H * D);
      rv[pos].assign(dv.v.begin() + dv.offset({b, s, 0, 0}), dv.v.begin() + dv.offset({b, s, 0, 0}) + H * D);
    }
  }
}

// gather_paged_kv through pool.layer(meta) returns exactly the host copy; decode over the
// pool agrees with the oracle over the host copy.
void expect_reads_back(Rng& rng, KvCachePool& pool, const HostCache& hk, const HostCache& hv,
                       int64_t layer, const KvCacheMetadata& meta) {
  SCOPED_TRACE("layer " + std::to_string(layer) + " lengths " + str(meta.lengths));
  const auto& cfg = pool.config();
  const int64_t H = cfg.kv_heads, D = cfg.head_dim, B = int64_t(pool.active().size());
  int64_t N = 0;
  for (int64_t len : meta.lengths) N += len;
  const PagedKv kv = pool.layer(layer, meta);
  Tensor ko = poisoned({N, H, D}, cfg.dtype, cfg.device), vo = poisoned({N, H, D}, cfg.dtype, cfg.device);
  gather_paged_kv(kv, ko, vo);
  const oracle::Dense gk = oracle::dense(ko), gv = oracle::dense(vo);
  Tensor ref_k = Tensor::empty({N, H, D}, DType::f32), ref_v = ref_k.clone();
  int64_t n = 0, wrong = 0;
  std::vector<int64_t> kv_indptr{0};
  for (int64_t b = 0; b < B; ++b) {
    const auto& rk = hk.at({layer, pool.active()[size_t(b)]});
    const auto& rv = hv.at({layer, pool.active()[size_t(b)]});
    for (int64_t t = 0; t < meta.lengths[size_t(b)]; ++t, ++n)
      for (int64_t x = 0; x < H * D; ++x) {
        wrong += gk.v[size_t(n * H * D + x)] != rk[size_t(t)][size_t(x)];
        wrong += gv.v[size_t(n * H * D + x)] != rv[size_t(t)][size_t(x)];
        ref_k.data_as<float>()[n * H * D + x] = float(rk[size_t(t)][size_t(x)]);
        ref_v.data_as<float>()[n * H * D + x] = float(rv[size_t(t)][size_t(x)]);
      }
    kv_indptr.push_back(n);
  }
  EXPECT_EQ(wrong, 0) << "gathered tokens differ from what was put";

  // Decode (Hq = 2 * Hkv) over the pool vs the oracle over the host copy.
  const int64_t Hq = 2 * H;
  const Tensor q = random_tensor(rng, {B, Hq, D}, cfg.dtype, cfg.device);
  std::vector<int64_t> qo(size_t(B) + 1);
  std::iota(qo.begin(), qo.end(), 0);
  const oracle::Result ref = oracle::prefill_ragged(q.view({B, Hq, D}), ref_k, ref_v, host_ints(qo),
                                                    host_ints(kv_indptr), {});
  Workspace ws(cfg.device, size_t(4) << 20);
  const Plan plan = plan_decode(ws, meta.host, kv, Hq);
  Tensor out = poisoned({B, Hq, D}, cfg.dtype, cfg.device);
  batch_decode(ws, plan, q, kv, {}, out);
  expect_output(out, ref.out, cfg.dtype, "decode over the pool");
}

void run_put_read_back(Device device, DType dtype, KvLayout layout) {
  FP_SEEDED_RNG(rng);
  SCOPED_TRACE(device.str() + " " + std::string(dtype_name(dtype)) + " " +
               std::string(layout_name(layout)));
  KvCachePool pool(small_config(device, dtype, layout, 16));
  const int64_t a = pool.bind_request(23), b = pool.bind_request(12), c = pool.bind_request(4);
  HostCache hk, hv;
  pool.activate(std::vector<int64_t>{b, a});  // batch order differs from id order
  // Prefill 6 tokens per row at position 0 (uniform), both layers.
  for (int64_t layer = 0; layer < 2; ++layer)
    put_and_mirror(rng, pool, hk, hv, layer, {0}, 6, true);
  {
    const KvCacheMetadata& meta = pool.metadata(6);
    EXPECT_EQ(meta.lengths, (std::vector<int64_t>{6, 6}));
    for (int64_t layer = 0; layer < 2; ++layer) expect_reads_back(rng, pool, hk, hv, layer, meta);
  }
  // Decode steps, one token at position 6 then 7 (uniform).
  for (int64_t pos : {6, 7}) {
    for (int64_t layer = 0; layer < 2; ++layer)
      put_and_mirror(rng, pool, hk, hv, layer, {pos}, 1, true);
    const KvCacheMetadata& meta = pool.metadata(pos + 1);
    for (int64_t layer = 0; layer < 2; ++layer) expect_reads_back(rng, pool, hk, hv, layer, meta);
  }
  // A new request joins: per-row starts (a at 8, b at 8, c at 0), two tokens each.
  pool.activate(std::vector<int64_t>{a, c, b});
  for (int64_t layer = 0; layer < 2; ++layer)
    put_and_mirror(rng, pool, hk, hv, layer, {8, 0, 8}, 2, false);
  {
    const std::vector<int64_t> lengths{10, 2, 10};
    const KvCacheMetadata& meta = pool.metadata(std::span<const int64_t>(lengths));
    EXPECT_EQ(meta.lengths, lengths);
    for (int64_t layer = 0; layer < 2; ++layer) expect_reads_back(rng, pool, hk, hv, layer, meta);
  }
  // Writing past a request's capacity, or asking for a longer row than it holds, throws.
  pool.activate(std::vector<int64_t>{c});
  Tensor k = random_tensor(rng, {1, 1, 2, pool.config().head_dim}, dtype, device);
  EXPECT_THROW(pool.put(0, 4, k, k), Error);
  for (int64_t start : {int64_t(4), INT64_MAX}) {  // one token into 4: the second overflows start + 1
    try {
      pool.put(0, start, k, k);
      ADD_FAILURE() << "put at " << start << " did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("start_positions[0]: expected 0..3"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(pool.metadata(5), Error);
  EXPECT_THROW(pool.put(2, 0, k, k), Error) << "layer out of range";
  expect_invariants(pool, {a, b, c});
}

TEST(Pool, CpuPutReadsBack) {
  run_put_read_back(Device::cpu(), DType::f32, KvLayout::NHD);
  run_put_read_back(Device::cpu(), DType::bf16, KvLayout::HND);
}

TEST(Pool, CudaPutReadsBack) {
  FP_REQUIRE_CUDA();
  run_put_read_back(cuda0(), DType::bf16, KvLayout::NHD);
  run_put_read_back(cuda0(), DType::f16, KvLayout::HND);
}

// put with k/v given as a strided view (e.g. a slice of a fused qkv projection).
TEST(Pool, CpuPutStridedInput) {
  FP_SEEDED_RNG(rng);
  KvCachePool pool(small_config(Device::cpu(), DType::f32, KvLayout::NHD));
  const int64_t a = pool.bind_request(8);
  pool.activate(std::vector<int64_t>{a});
  const Tensor kv = random_tensor(rng, {1, 5, 2, 2, 16}, DType::f32, Device::cpu());  // [B,S,2,H,D]
  const Tensor k = kv.select(2, 0), v = kv.select(2, 1);
  ASSERT_FALSE(k.is_contiguous());
  pool.put(0, 0, k, v);
  const KvCacheMetadata& meta = pool.metadata(5);
  Tensor ko = poisoned({5, 2, 16}, DType::f32, Device::cpu()), vo = ko.clone();
  gather_paged_kv(pool.layer(0, meta), ko, vo);
  const oracle::Dense dk = oracle::dense(k), dgo = oracle::dense(ko);
  const oracle::Dense dv = oracle::dense(v), dvo = oracle::dense(vo);
  EXPECT_EQ(dk.v, dgo.v);
  EXPECT_EQ(dv.v, dvo.v);
}

// ---- metadata reuse ------------------------------------------------------------------------
void run_metadata_reuse(Device device) {
  KvCachePool pool(small_config(device, DType::f32, KvLayout::NHD, 24));
  const int64_t a = pool.bind_request(20), b = pool.bind_request(12);
  pool.activate(std::vector<int64_t>{a, b});
  auto check_table = [&](const KvCacheMetadata& m, const std::vector<int64_t>& lengths) {
    EXPECT_EQ(m.lengths, lengths);
    const auto indptr = oracle::ints(m.host.indptr), indices = oracle::ints(m.host.indices),
               last = oracle::ints(m.host.last_page_len);
    ASSERT_EQ(indptr.size(), lengths.size() + 1);
    EXPECT_EQ(indptr[0], 0);
    for (size_t r = 0; r < lengths.size(); ++r) {
      const int64_t pages = (lengths[r] + 3) / 4;
      EXPECT_EQ(indptr[r + 1] - indptr[r], pages) << "row " << r;
      EXPECT_EQ(last[r], lengths[r] == 0 ? 0 : lengths[r] - 4 * (pages - 1)) << "row " << r;
      const auto& owned = pool.pages_of(pool.active()[r]);
      for (int64_t i = 0; i < pages; ++i)  // token t of the row is in its (t / page_size)-th page
        EXPECT_EQ(indices[size_t(indptr[r] + i)], owned[size_t(i)]) << "row " << r << " page " << i;
    }
    // The device copy holds the same table.
    EXPECT_EQ(oracle::ints(m.device.indptr), indptr);
    EXPECT_EQ(oracle::ints(m.device.last_page_len), last);
    EXPECT_EQ(m.device.indptr.device(), device);
    const auto dev_indices = oracle::ints(m.device.indices);
    for (int64_t i = 0; i < indptr.back(); ++i) EXPECT_EQ(dev_indices[size_t(i)], indices[size_t(i)]);
  };
  const std::vector<int64_t> l1{5, 2}, l2{6, 4}, l3{9, 4}, l4{9, 4};
  const KvCacheMetadata& m1 = pool.metadata(std::span<const int64_t>(l1));
  check_table(m1, l1);
  const void* indptr_ptr = m1.device.indptr.data();
  const void* indices_ptr = m1.device.indices.data();
  const void* last_ptr = m1.device.last_page_len.data();

  // Only last-page lengths grow (pages per row unchanged): updated in place.
  const KvCacheMetadata& m2 = pool.metadata(std::span<const int64_t>(l2));
  check_table(m2, l2);
  EXPECT_FALSE(m2.rebuilt);
  EXPECT_EQ(m2.device.indptr.data(), indptr_ptr);
  EXPECT_EQ(m2.device.indices.data(), indices_ptr);
  EXPECT_EQ(m2.device.last_page_len.data(), last_ptr);

  // Row 0 needs a third page: rebuilt.
  const KvCacheMetadata& m3 = pool.metadata(std::span<const int64_t>(l3));
  check_table(m3, l3);
  EXPECT_TRUE(m3.rebuilt);
  const KvCacheMetadata& m4 = pool.metadata(std::span<const int64_t>(l4));
  EXPECT_FALSE(m4.rebuilt);
  check_table(m4, l4);

  // A different batch (order) is rebuilt too.
  pool.activate(std::vector<int64_t>{b, a});
  const std::vector<int64_t> l5{4, 9};
  const KvCacheMetadata& m5 = pool.metadata(std::span<const int64_t>(l5));
  EXPECT_TRUE(m5.rebuilt);
  check_table(m5, l5);

  // Other requests, bound after the first table, in a batch of the same size: the same
  // buffers (a graph captured over them replays), with their pages.
  const int64_t c = pool.bind_request(30), d = pool.bind_request(7);
  pool.activate(std::vector<int64_t>{c, d});
  const std::vector<int64_t> l6{30, 7};
  const KvCacheMetadata& m6 = pool.metadata(std::span<const int64_t>(l6));
  EXPECT_TRUE(m6.rebuilt);
  check_table(m6, l6);
  EXPECT_EQ(m6.device.indptr.data(), indptr_ptr);
  EXPECT_EQ(m6.device.indices.data(), indices_ptr);
  EXPECT_EQ(m6.device.last_page_len.data(), last_ptr);
  // A smaller batch after an unbind keeps them too, and so does a larger one (the buffers
  // have a row per page of the pool); its table is whole.
  pool.unbind_request(a);
  pool.activate(std::vector<int64_t>{d});
  const std::vector<int64_t> l7{5};
  const KvCacheMetadata& m7 = pool.metadata(std::span<const int64_t>(l7));
  check_table(m7, l7);
  EXPECT_EQ(m7.device.indptr.data(), indptr_ptr);
  EXPECT_EQ(m7.device.indices.data(), indices_ptr);
  pool.activate(std::vector<int64_t>{d, b, c});
  const std::vector<int64_t> l8{7, 12, 29};
  const KvCacheMetadata& m8 = pool.metadata(std::span<const int64_t>(l8));
  check_table(m8, l8);
  EXPECT_EQ(m8.device.indptr.data(), indptr_ptr);
  EXPECT_EQ(m8.device.indices.data(), indices_ptr);
  EXPECT_EQ(m8.device.last_page_len.data(), last_ptr);
  // More rows than pages (requests bound with no pages) grow indptr / last_page_len.
  std::vector<int64_t> many{d, b, c}, many_lengths{7, 12, 29};
  while (int64_t(many.size()) <= 24) {
    many.push_back(pool.bind_request(0));
    many_lengths.push_back(0);
  }
  pool.activate(many);
  check_table(pool.metadata(std::span<const int64_t>(many_lengths)), many_lengths);
}

TEST(Pool, CpuMetadataReusedInPlace) { run_metadata_reuse(Device::cpu()); }

TEST(Pool, CudaMetadataReusedInPlace) {
  FP_REQUIRE_CUDA();
  run_metadata_reuse(cuda0());
}

TEST(Pool, CudaExhaustion) {
  FP_REQUIRE_CUDA();
  KvCachePool pool(small_config(cuda0(), DType::bf16, KvLayout::NHD));
  const int64_t a = pool.bind_request(40);
  EXPECT_THROW(pool.bind_request(9), KvCacheExhausted);
  EXPECT_EQ(pool.free_pages(), 2);
  expect_invariants(pool, {a});
}


// A request slot unbound and bound again with more pages, then activated in the same row
// order: the page table must follow the new pages (not reuse buffers sized for the old ones).
TEST(Pool, RebindSameIdWithMorePagesRebuildsTables) {
  KvCachePool pool(small_config(Device::cpu(), DType::f32, KvLayout::NHD, 16));
  const int64_t a = pool.bind_request(4);  // one page
  const std::vector<int64_t> ids{a};
  pool.activate(ids);
  pool.metadata(std::vector<int64_t>{4});
  pool.unbind_request(a);
  const int64_t b = pool.bind_request(40);  // ten pages, the same slot id
  ASSERT_EQ(b, a);
  pool.activate(ids);
  const KvCacheMetadata& meta = pool.metadata(std::vector<int64_t>{40});
  const int32_t* indptr = meta.host.indptr.data_as<int32_t>();
  ASSERT_EQ(indptr[1], 10);
  ASSERT_GE(meta.host.indices.numel(), 10);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(meta.host.indices.data_as<int32_t>()[i], pool.pages_of(b)[size_t(i)]) << i;
  EXPECT_EQ(meta.host.last_page_len.data_as<int32_t>()[0], 4);
  // put() goes through its own whole-capacity table: it must map all 40 positions too.
  const auto& cfg = pool.config();
  Tensor k = Tensor::empty({1, 40, cfg.kv_heads, cfg.head_dim}, DType::f32);
  Tensor v = Tensor::empty(k.shape(), DType::f32);
  k.fill_(1.5);
  v.fill_(-2.5);
  pool.put(0, 0, k, v);
  Tensor k_out = Tensor::empty({40, cfg.kv_heads, cfg.head_dim}, DType::f32);
  Tensor v_out = Tensor::empty(k_out.shape(), DType::f32);
  gather_paged_kv(pool.layer(0, meta), k_out, v_out);
  for (int64_t i = 0; i < k_out.numel(); ++i) {
    ASSERT_EQ(k_out.data_as<float>()[i], 1.5f) << i;
    ASSERT_EQ(v_out.data_as<float>()[i], -2.5f) << i;
  }
}

}  // namespace
}  // namespace fpt
