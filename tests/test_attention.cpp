// The seed's interface: backend parsing and selection, TorchNativeAttentionKernel on
// contiguous inputs, FlashInferAttentionKernel on paged (pool) and ragged contexts.
#include <functional>
#include <map>
#include <optional>

#include "test_util.h"

namespace fpt {
namespace {

TEST(Backend, Parse) {
  for (const char* s : {"torch_native", "TORCH_NATIVE", "TorchNative", "torchnative", "Torch_Native"})
    EXPECT_EQ(parse_backend(s), AttentionBackend::TorchNative) << s;
  for (const char* s : {"flashinfer", "FlashInfer", "FLASHINFER", "", "   "})
    EXPECT_EQ(parse_backend(s), AttentionBackend::FlashInfer) << "'" << s << "'";
  EXPECT_EQ(backend_id(AttentionBackend::TorchNative), "torch_native");
  EXPECT_EQ(backend_id(AttentionBackend::FlashInfer), "flashinfer");
  EXPECT_EQ(parse_backend(backend_id(AttentionBackend::TorchNative)), AttentionBackend::TorchNative);
  for (const char* s : {"flash", "torch", "sdpa", "flashinfer2"}) {
    try {
      parse_backend(s);
      ADD_FAILURE() << s << ": expected Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected torch_native|flashinfer"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Backend, InstallAndCurrent) {
  AttentionKernel& t = install_backend(AttentionBackend::TorchNative);
  EXPECT_EQ(t.backend(), AttentionBackend::TorchNative);
  EXPECT_EQ(&current_kernel(), &t);
  EXPECT_NE(dynamic_cast<TorchNativeAttentionKernel*>(&t), nullptr);
  AttentionKernel& f = install_backend(AttentionBackend::FlashInfer);
  const std::string why = flashinfer_unavailable_reason();
  EXPECT_EQ(f.backend(), why.empty() ? AttentionBackend::FlashInfer : AttentionBackend::TorchNative)
      << "unavailable reason: " << why;
  EXPECT_EQ(&current_kernel(), &f);
  EXPECT_EQ(current_kernel().backend(), f.backend());
}

// ---- torch_native ----------------------------------------------------------------------------
void run_torch_native(Rng& rng, Device device, DType dtype, bool causal, bool with_mask) {
  SCOPED_TRACE(device.str() + " " + std::string(dtype_name(dtype)) + " causal=" +
               std::to_string(causal) + " mask=" + std::to_string(with_mask));
  const int64_t B = 2, Hq = 8, Hkv = 2, S = 5, L = 9, D = 64;
  const Tensor q = random_tensor(rng, {B, Hq, S, D}, dtype, device, -2, 2);
  const Tensor k = random_tensor(rng, {B, Hkv, L, D}, dtype, device, -2, 2);
  const Tensor v = random_tensor(rng, {B, Hkv, L, D}, dtype, device);
  Tensor mask;
  if (with_mask) {
    Tensor h = Tensor::empty({B, 1, S, L}, DType::boolean);
    for (int64_t i = 0; i < h.numel(); ++i) h.data_as<uint8_t>()[i] = rng.coin(0.7);
    mask = h.to(device);
  }
  AttentionContext ctx = AttentionContext::contiguous(0.0f, causal);
  ctx.return_lse = true;
  ctx.lse = poisoned({B, Hq, S}, DType::f32, device);
  const oracle::Result ref = oracle::sdpa(q, k, v, mask, ctx.params());
  TorchNativeAttentionKernel kernel;
  const Tensor out = kernel.forward(q, k, v, mask, ctx);
  expect_output(out, ref.out, dtype);
  expect_lse(ctx.lse, ref.lse, dtype);

  Tensor out2 = poisoned({B, Hq, S, D}, dtype, device);
  ctx.lse.fill_(std::nan(""));
  kernel.forward_into(q, k, v, mask, ctx, out2);
  expect_output(out2, ref.out, dtype, "forward_into");
  expect_lse(ctx.lse, ref.lse, dtype);
}

TEST(TorchNative, CpuMatchesOracle) {
  FP_SEEDED_RNG(rng);
  FP_CASE(run_torch_native(rng, Device::cpu(), DType::f32, false, false));
  FP_CASE(run_torch_native(rng, Device::cpu(), DType::f32, true, false));
  FP_CASE(run_torch_native(rng, Device::cpu(), DType::f32, false, true));
  FP_CASE(run_torch_native(rng, Device::cpu(), DType::bf16, true, false));
}

TEST(TorchNative, CudaMatchesOracle) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (DType t : {DType::bf16, DType::f16}) {
    FP_CASE(run_torch_native(rng, cuda0(), t, true, false));
    FP_CASE(run_torch_native(rng, cuda0(), t, false, true));
  }
}

// A paged context keeps PyTorch's top-left causal per row (README): over a cached prefix
// (S < L) the queries see keys 0..i, not flashinfer's bottom-right i + L - S. With an explicit
// bottom-right mask (what the seed's models pass) the two backends agree.
KvCacheConfig tiny_config();
TEST(TorchNative, PagedCausalIsTopLeftAndAMaskAlignsIt) {
  FP_SEEDED_RNG(rng);
  KvCachePool pool(tiny_config());
  pool.activate(std::vector<int64_t>{pool.bind_request(12)});
  const Tensor k = random_tensor(rng, {1, 12, 2, 64}, DType::f32, Device::cpu());
  const Tensor v = random_tensor(rng, {1, 12, 2, 64}, DType::f32, Device::cpu());
  pool.put(0, 0, k, v);
  const KvCacheMetadata& meta = pool.metadata(12);
  Workspace ws(Device::cpu(), size_t(4) << 20);
  const int64_t S = 4;
  const Tensor q = random_tensor(rng, {1, 4, S, 64}, DType::f32, Device::cpu());
  const AttentionContext ctx =
      AttentionContext::paged(0.0f, true, 4, 2, 64, 0, 12 - S, S, &pool, &meta, &ws);
  const Tensor kh = k.transpose(1, 2), vh = v.transpose(1, 2);  // [1, Hkv, 12, D]
  expect_output(TorchNativeAttentionKernel().forward(q, Tensor(), Tensor(), {}, ctx),
                oracle::sdpa(q, kh, vh, Tensor(), ctx.params()).out, DType::f32, "top-left");
  Tensor mask = Tensor::empty({S, 12}, DType::boolean);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < 12; ++j) mask.data_as<bool>()[i * 12 + j] = j <= i + 12 - S;
  AttentionContext masked = ctx;
  masked.causal = false;
  const Tensor bottom_right = FlashInferAttentionKernel().forward(q, Tensor(), Tensor(), {}, ctx);
  expect_output(TorchNativeAttentionKernel().forward(q, Tensor(), Tensor(), mask, masked),
                oracle::dense(bottom_right), DType::f32, "masked as flashinfer's causal");
}

TEST(TorchNative, MaskAndCausalIsAnError) {
  const Tensor q = Tensor::zeros({1, 2, 3, 64}, DType::f32);
  const AttentionContext ctx = AttentionContext::contiguous(0.0f, true);
  TorchNativeAttentionKernel kernel;
  EXPECT_THROW(kernel.forward(q, q, q, Tensor::zeros({3, 3}, DType::boolean), ctx), Error);
}

// ---- flashinfer over the page pool --------------------------------------------------------

// [B, H, S, D] -> [B*S, H, D] on the host: token-major, as the oracle's ragged form.
Tensor tokens(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).transpose(1, 2).contiguous();
  return h.view({t.size(0) * t.size(2), t.size(1), t.size(3)});
}

struct History {  // every token put so far, per (layer, row): [t][h*d]
  std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<double>>> k, v;
};

void flashinfer_step(Rng& rng, KvCachePool& pool, Workspace& ws, History& hist,
                     int64_t start_pos, int64_t S, int64_t Hq, bool return_lse) {
  const auto& cfg = pool.config();
  const int64_t B = int64_t(pool.active().size()), Hkv = cfg.kv_heads, D = cfg.head_dim;
  SCOPED_TRACE("step start_pos=" + std::to_string(start_pos) + " S=" + std::to_string(S));
  const KvCacheMetadata& meta = pool.metadata(start_pos + S);
  FlashInferAttentionKernel kernel;
  for (int64_t layer = 0; layer < cfg.layers; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    const Tensor q = random_tensor(rng, {B, Hq, S, D}, cfg.dtype, cfg.device, -2, 2);
    const Tensor k = random_tensor(rng, {B, Hkv, S, D}, cfg.dtype, cfg.device, -2, 2);
    const Tensor v = random_tensor(rng, {B, Hkv, S, D}, cfg.dtype, cfg.device);
    // Mirror the new tokens, then build the full history [sum L, Hkv, D] for the oracle.
    const oracle::Dense dk = oracle::dense(k), dv = oracle::dense(v);
    std::vector<int64_t> kv_indptr{0}, qo{0};
    std::vector<float> all_k, all_v;
    for (int64_t b = 0; b < B; ++b) {
      auto& rk = hist.k[{layer, pool.active()[size_t(b)]}];
      auto& rv = hist.v[{layer, pool.active()[size_t(b)]}];
      rk.resize(size_t(start_pos + S));
      rv.resize(size_t(start_pos + S));
      for (int64_t s = 0; s < S; ++s) {
        rk[size_t(start_pos + s)].clear();
        rv[size_t(start_pos + s)].clear();
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t x = 0; x < D; ++x) {
            rk[size_t(start_pos + s)].push_back(dk.at({b, h, s, x}));
            rv[size_t(start_pos + s)].push_back(dv.at({b, h, s, x}));
          }
      }
      for (const auto& tok : rk) all_k.insert(all_k.end(), tok.begin(), tok.end());
      for (const auto& tok : rv) all_v.insert(all_v.end(), tok.begin(), tok.end());
      kv_indptr.push_back(kv_indptr.back() + start_pos + S);
      qo.push_back(qo.back() + S);
    }
    const int64_t N = kv_indptr.back();
    Tensor hk = Tensor::from_blob(all_k.data(), {N, Hkv, D}, DType::f32);
    Tensor hv = Tensor::from_blob(all_v.data(), {N, Hkv, D}, DType::f32);
    AttentionContext ctx = AttentionContext::paged(0.0f, true, Hq, Hkv, D, layer, start_pos, S,
                                                   &pool, &meta, &ws);
    ctx.return_lse = return_lse;
    if (return_lse) ctx.lse = poisoned({B, Hq, S}, DType::f32, cfg.device);
    const oracle::Result ref = oracle::prefill_ragged(tokens(q), hk, hv, host_ints(qo),
                                                      host_ints(kv_indptr), ctx.params());
    Tensor out = poisoned({B, Hq, S, D}, cfg.dtype, cfg.device);
    kernel.forward_into(q, k, v, Tensor(), ctx, out);
    expect_output(tokens(out), ref.out, cfg.dtype);
    if (return_lse) {
      const Tensor lse_tokens = ctx.lse.to(Device::cpu()).transpose(1, 2).contiguous().view({B * S, Hq});
      expect_lse(lse_tokens, ref.lse, cfg.dtype);
    }
  }
}

// A pool of two layers and 2 KV heads with room for three rows of up to max_row tokens, and
// the trace line that names the case.
KvCacheConfig three_row_config(Device device, DType dtype, KvLayout layout, int64_t page_size,
                               int64_t D, int64_t max_row) {
  KvCacheConfig cfg;
  cfg.layers = 2;
  cfg.kv_heads = 2;
  cfg.head_dim = D;
  cfg.page_size = page_size;
  cfg.num_pages = 3 * (max_row + page_size) / page_size + 4;
  cfg.dtype = dtype;
  cfg.device = device;
  cfg.layout = layout;
  return cfg;
}

std::string case_name(const KvCacheConfig& c) {
  return c.device.str() + " " + std::string(dtype_name(c.dtype)) + " " +
         std::string(layout_name(c.layout)) + " P=" + std::to_string(c.page_size) +
         " D=" + std::to_string(c.head_dim);
}

void run_flashinfer_paged(Device device, DType dtype, KvLayout layout, int64_t page_size, int64_t D) {
  FP_SEEDED_RNG(rng);
  const KvCacheConfig cfg = three_row_config(device, dtype, layout, page_size, D, 64);
  SCOPED_TRACE(case_name(cfg));
  KvCachePool pool(cfg);
  Workspace ws(device, size_t(16) << 20);
  History hist;
  const int64_t a = pool.bind_request(60), b = pool.bind_request(40), c = pool.bind_request(30);
  pool.activate(std::vector<int64_t>{c, a, b});
  const int64_t Hq = 8;
  // Each step puts its tokens before attending, so a failing step leaves the history whole.
  FP_CASE(flashinfer_step(rng, pool, ws, hist, 0, 17, Hq, true));   // prefill from empty
  FP_CASE(flashinfer_step(rng, pool, ws, hist, 17, 1, Hq, true));   // decode
  FP_CASE(flashinfer_step(rng, pool, ws, hist, 18, 1, Hq, false));  // decode, no lse
  FP_CASE(flashinfer_step(rng, pool, ws, hist, 19, 6, Hq, true));   // prefill over a cached prefix
}

TEST(FlashInfer, CpuPagedPrefillThenDecode) {
  FP_CASE(run_flashinfer_paged(Device::cpu(), DType::f32, KvLayout::NHD, 16, 64));
  FP_CASE(run_flashinfer_paged(Device::cpu(), DType::f32, KvLayout::HND, 3, 40));
  FP_CASE(run_flashinfer_paged(Device::cpu(), DType::bf16, KvLayout::NHD, 1, 64));
}

TEST(FlashInfer, CudaPagedPrefillThenDecode) {
  FP_REQUIRE_CUDA();
  for (DType t : {DType::bf16, DType::f16}) {
    FP_CASE(run_flashinfer_paged(cuda0(), t, KvLayout::NHD, 16, 128));
    FP_CASE(run_flashinfer_paged(cuda0(), t, KvLayout::HND, 1, 64));
    FP_CASE(run_flashinfer_paged(cuda0(), t, KvLayout::NHD, 64, 256));
  }
}

// indptr_dtype / indptr_device: the form the engine hands over (int32 on the queries' device
// is what the kernels take; others are converted by the backend).
void run_flashinfer_ragged(Rng& rng, Device device, DType dtype, bool causal, int64_t Hq,
                           int64_t Hkv, DType indptr_dtype = DType::i32,
                           std::optional<Device> indptr_device = std::nullopt) {
  SCOPED_TRACE(device.str() + " causal=" + std::to_string(causal) + " Hq=" + std::to_string(Hq) +
               " Hkv=" + std::to_string(Hkv) + " indptr " + std::string(dtype_name(indptr_dtype)));
  const int64_t D = 64;
  const std::vector<int64_t> indptr{0, 5, 5, 22, 23};
  const int64_t N = indptr.back();
  const Tensor q = random_tensor(rng, {N, Hq, D}, dtype, device, -2, 2);
  const Tensor k = random_tensor(rng, {N, Hkv, D}, dtype, device, -2, 2);
  const Tensor v = random_tensor(rng, {N, Hkv, D}, dtype, device);
  AttentionContext ctx = AttentionContext::ragged(
      0.0f, causal, Hq, Hkv, D, host_ints(indptr, indptr_dtype).to(indptr_device.value_or(device)));
  EXPECT_TRUE(ctx.is_ragged_contiguous());
  EXPECT_FALSE(ctx.is_paged());
  ctx.return_lse = true;
  ctx.lse = poisoned({N, Hq}, DType::f32, device);
  const oracle::Result ref =
      oracle::prefill_ragged(q, k, v, host_ints(indptr), Tensor(), ctx.params());
  FlashInferAttentionKernel kernel;
  const Tensor out = kernel.forward(q, k, v, Tensor(), ctx);
  expect_output(out, ref.out, dtype);
  expect_lse(ctx.lse, ref.lse, dtype);
}

TEST(FlashInfer, CpuRaggedContiguous) {
  FP_SEEDED_RNG(rng);
  for (bool causal : {true, false}) {
    FP_CASE(run_flashinfer_ragged(rng, Device::cpu(), DType::f32, causal, 4, 4));
    FP_CASE(run_flashinfer_ragged(rng, Device::cpu(), DType::f32, causal, 8, 2));
    FP_CASE(run_flashinfer_ragged(rng, Device::cpu(), DType::f32, causal, 8, 2, DType::i64));
  }
}

TEST(FlashInfer, CudaRaggedContiguous) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  for (bool causal : {true, false}) {
    FP_CASE(run_flashinfer_ragged(rng, cuda0(), DType::bf16, causal, 8, 2));
    // The seed's cu_seqlens as the engine may hold them: int64 on the GPU, or on the host.
    FP_CASE(run_flashinfer_ragged(rng, cuda0(), DType::bf16, causal, 8, 2, DType::i64));
    FP_CASE(run_flashinfer_ragged(rng, cuda0(), DType::bf16, causal, 8, 2, DType::i32,
                                  Device::cpu()));
  }
}

// The seed's chunked-prefill path: ragged queries over the pool (AttentionContext::
// paged_ragged), each row with its own number of new tokens (0 included) put at its own start,
// then two query splits over the same metadata: the backend's per-step plan cache must key on
// the split too (it keyed on the table alone, so the second split ran the first one's plan).
void run_flashinfer_paged_ragged(Device device, DType dtype, KvLayout layout, int64_t page_size,
                                 int64_t D) {
  FP_SEEDED_RNG(rng);
  const KvCacheConfig cfg = three_row_config(device, dtype, layout, page_size, D, 80);
  SCOPED_TRACE(case_name(cfg));
  KvCachePool pool(cfg);
  Workspace ws(device, size_t(16) << 20);
  pool.activate(std::vector<int64_t>{pool.bind_request(80), pool.bind_request(50), pool.bind_request(70)});
  const int64_t Hq = 8, Hkv = cfg.kv_heads;
  FlashInferAttentionKernel kernel;
  std::vector<int64_t> lengths(3, 0);
  // Chunks per step and row: a prompt split unevenly, a row that sits a step out, one token.
  for (const std::vector<int64_t>& chunk : {std::vector<int64_t>{19, 33, 5},
                                            std::vector<int64_t>{0, 17, 40},
                                            std::vector<int64_t>{41, 0, 1}}) {
    SCOPED_TRACE("chunk " + str(chunk));
    std::vector<int64_t> qo{0}, starts = lengths;
    for (size_t b = 0; b < 3; ++b) {
      qo.push_back(qo.back() + chunk[b]);
      lengths[b] += chunk[b];
    }
    const int64_t N = qo.back();
    const KvCacheMetadata& meta = pool.metadata(lengths);
    for (int64_t layer = 0; layer < cfg.layers; ++layer) {
      const Tensor q = random_tensor(rng, {N, Hq, D}, dtype, device, -2, 2);
      const Tensor k = random_tensor(rng, {N, Hkv, D}, dtype, device, -2, 2);
      const Tensor v = random_tensor(rng, {N, Hkv, D}, dtype, device);
      AttentionContext ctx = AttentionContext::paged_ragged(
          0.0f, true, Hq, Hkv, D, layer, host_ints(qo).to(device), host_ints(starts, DType::i64),
          host_ints(lengths, DType::i64), &pool, &meta, &ws);
      ctx.return_lse = true;
      ctx.lse = poisoned({N, Hq}, DType::f32, device);
      Tensor out = poisoned({N, Hq, D}, dtype, device);
      kernel.forward_into(q, k, v, Tensor(), ctx, out);
      const oracle::Result ref =
          oracle::prefill_paged(q, host_ints(qo), pool.layer(layer, meta), Tensor(), ctx.params());
      expect_output(out, ref.out, dtype);
      expect_lse(ctx.lse, ref.lse, dtype);
    }
  }
  // Same table, other splits of the last tokens (the cache holds them all now): 3 + 1 + 9,
  // then 1 + 9 + 3 queries, read-only (no key/value).
  const KvCacheMetadata& meta = pool.metadata(lengths);
  for (const std::vector<int64_t>& qo : {std::vector<int64_t>{0, 3, 4, 13},
                                         std::vector<int64_t>{0, 1, 10, 13}}) {
    SCOPED_TRACE("split " + str(qo));
    const Tensor q = random_tensor(rng, {13, Hq, D}, dtype, device, -2, 2);
    std::vector<int64_t> starts(3);
    for (size_t b = 0; b < 3; ++b) starts[b] = lengths[b] - (qo[b + 1] - qo[b]);
    const AttentionContext ctx = AttentionContext::paged_ragged(
        0.0f, true, Hq, Hkv, D, 0, host_ints(qo).to(device), host_ints(starts, DType::i64),
        host_ints(lengths, DType::i64), &pool, &meta, &ws);
    Tensor out = poisoned({13, Hq, D}, dtype, device);
    kernel.forward_into(q, Tensor(), Tensor(), Tensor(), ctx, out);
    expect_output(out, oracle::prefill_paged(q, host_ints(qo), pool.layer(0, meta), Tensor(),
                                             ctx.params()).out,
                  dtype);
  }
}

TEST(FlashInfer, CpuPagedRaggedChunks) {
  FP_CASE(run_flashinfer_paged_ragged(Device::cpu(), DType::f32, KvLayout::NHD, 16, 64));
  FP_CASE(run_flashinfer_paged_ragged(Device::cpu(), DType::bf16, KvLayout::HND, 1, 40));
}

TEST(FlashInfer, CudaPagedRaggedChunks) {
  FP_REQUIRE_CUDA();
  for (DType t : {DType::bf16, DType::f16}) {
    FP_CASE(run_flashinfer_paged_ragged(cuda0(), t, KvLayout::NHD, 16, 128));
    FP_CASE(run_flashinfer_paged_ragged(cuda0(), t, KvLayout::HND, 1, 64));
    FP_CASE(run_flashinfer_paged_ragged(cuda0(), t, KvLayout::NHD, 64, 256));
  }
}

// A CPU pool of 4 pages of 4 tokens, 2 KV heads of 64: for the error cases.
KvCacheConfig tiny_config() {
  KvCacheConfig cfg;
  cfg.kv_heads = 2;
  cfg.head_dim = 64;
  cfg.page_size = 4;
  cfg.num_pages = 4;
  cfg.dtype = DType::f32;
  return cfg;
}

TEST(FlashInfer, ContextErrors) {
  FlashInferAttentionKernel kernel;
  const Tensor q = Tensor::zeros({1, 2, 3, 64}, DType::f32);
  // Neither paged nor ragged.
  EXPECT_THROW(kernel.forward(q, q, q, Tensor(), AttentionContext::contiguous(0.0f, true)), Error);
  // Paged without a workspace.
  KvCachePool pool(tiny_config());
  const int64_t a = pool.bind_request(8);
  pool.activate(std::vector<int64_t>{a});
  const KvCacheMetadata& meta = pool.metadata(3);
  const AttentionContext ctx =
      AttentionContext::paged(0.0f, true, 2, 2, 64, 0, 0, 3, &pool, &meta, nullptr);
  EXPECT_TRUE(ctx.is_paged());
  try {
    kernel.forward(q, Tensor::zeros({1, 2, 3, 64}, DType::f32), Tensor::zeros({1, 2, 3, 64}, DType::f32),
                   Tensor(), ctx);
    ADD_FAILURE() << "paged without workspace: expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("orkspace"), std::string::npos) << e.what();
  }
}

// The backend caches its plan per step, keyed by the metadata's address and version: a new
// pool whose metadata sits where the old one's did (same storage) must not hit the old plan.
TEST(FlashInfer, PlanCacheFollowsANewPoolAtTheSameAddress) {
  FP_SEEDED_RNG(rng);
  std::optional<KvCachePool> pool;
  Workspace ws(Device::cpu(), size_t(4) << 20);
  FlashInferAttentionKernel kernel;
  for (int64_t len : {3, 7}) {
    SCOPED_TRACE("cache of " + std::to_string(len) + " tokens");
    pool.emplace(tiny_config());
    pool->activate(std::vector<int64_t>{pool->bind_request(8)});
    const Tensor k = random_tensor(rng, {1, len, 2, 64}, DType::f32, Device::cpu());
    const Tensor v = random_tensor(rng, {1, len, 2, 64}, DType::f32, Device::cpu());
    pool->put(0, 0, k, v);
    const KvCacheMetadata& meta = pool->metadata(len);
    const Tensor q = random_tensor(rng, {1, 2, 1, 64}, DType::f32, Device::cpu());
    const auto ref = oracle::decode(q.view({1, 2, 64}), pool->layer(0, meta), {});
    const AttentionContext ctx =
        AttentionContext::paged(0.0f, false, 2, 2, 64, 0, len - 1, 1, pool.operator->(), &meta, &ws);
    Tensor out = poisoned({1, 2, 1, 64}, DType::f32, Device::cpu());
    ASSERT_NO_THROW(kernel.forward_into(q, Tensor(), Tensor(), {}, ctx, out));
    expect_output(out.view({1, 2, 64}), ref.out, DType::f32);
  }
}

// Bad contexts reach an Error that names what is wrong (ctx.indptr, key, out, mask) in the
// caller's terms, on both backends, instead of a slicing error, a silently ignored mask or
// output rows left unwritten.
TEST(Backend, BadContextsNameTheArgument) {
  auto expect_error = [](const std::string& name, const std::function<void()>& call,
                         const std::vector<std::string>& parts) {
    SCOPED_TRACE(name);
    try {
      call();
      ADD_FAILURE() << name << ": expected flashpage::Error";
    } catch (const Error& e) {
      for (const auto& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << name << ": \"" << e.what() << "\" lacks \"" << part << "\"";
    }
  };
  TorchNativeAttentionKernel torch_native;
  FlashInferAttentionKernel flashinfer;
  // Ragged contiguous segments over N = 4 tokens.
  const Tensor q3 = Tensor::zeros({4, 2, 64}, DType::f32);
  auto ragged = [](Tensor indptr) { return AttentionContext::ragged(0.0f, false, 2, 2, 64, indptr); };
  expect_error("decreasing", [&] { torch_native.forward(q3, q3, q3, {}, ragged(host_ints({0, 3, 2}))); },
               {"ctx.indptr", "non-decreasing"});
  expect_error("past N", [&] { torch_native.forward(q3, q3, q3, {}, ragged(host_ints({0, 6}))); },
               {"ctx.indptr", "== 4"});
  expect_error("short of N", [&] { torch_native.forward(q3, q3, q3, {}, ragged(host_ints({0, 3}))); },
               {"ctx.indptr", "== 4"});
  expect_error("[0] != 0", [&] { torch_native.forward(q3, q3, q3, {}, ragged(host_ints({2, 4}))); },
               {"ctx.indptr", "[0] == 0"});
  expect_error("key tokens", [&] {
    const Tensor k = Tensor::zeros({3, 2, 64}, DType::f32);
    torch_native.forward(q3, k, k, {}, ragged(host_ints({0, 4})));
  }, {"key", "query tokens N"});

  // Paged: one request of 8 tokens' capacity, 3 in the cache after this step.
  KvCachePool pool(tiny_config());
  pool.activate(std::vector<int64_t>{pool.bind_request(8)});
  const KvCacheMetadata& meta = pool.metadata(3);
  Workspace ws(Device::cpu(), size_t(4) << 20);
  const AttentionContext step = AttentionContext::paged(0.0f, false, 2, 2, 64, 0, 0, 3, &pool, &meta, &ws);
  const Tensor q = Tensor::zeros({1, 2, 3, 64}, DType::f32);
  const Tensor bad_k = Tensor::zeros({1, 3, 2, 64}, DType::f32);  // [B,S,Hkv,D]: S and H swapped
  for (AttentionKernel* kernel : std::vector<AttentionKernel*>{&torch_native, &flashinfer})
    expect_error("key layout", [&] { kernel->forward(q, bad_k, bad_k, {}, step); },
                 {"key: expected shape [1,2,3,64]", "got [1,3,2,64]"});
  expect_error("torch_native mask narrower than the row", [&] {
    torch_native.forward(q, Tensor(), Tensor(), Tensor::zeros({3, 2}, DType::boolean), step);
  }, {"mask", "3 keys"});
  const Tensor q1 = Tensor::zeros({1, 2, 1, 64}, DType::f32);
  const AttentionContext decode = AttentionContext::paged(0.0f, false, 2, 2, 64, 0, 0, 1, &pool, &meta, &ws);
  expect_error("flashinfer decode out", [&] {
    Tensor out = Tensor::empty({1, 2, 1, 32}, DType::f32);
    flashinfer.forward_into(q1, Tensor(), Tensor(), {}, decode, out);
  }, {"out: expected shape [1,2,1,64]"});

  // Ragged queries over the cache (2 new tokens at position 1).
  const Tensor qr = Tensor::zeros({2, 2, 64}, DType::f32);
  auto paged_ragged = [&](Tensor indptr) {
    return AttentionContext::paged_ragged(0.0f, false, 2, 2, 64, 0, indptr, host_ints({1}),
                                          host_ints({3}), &pool, &meta, &ws);
  };
  expect_error("torch_native mask with ragged paged queries", [&] {
    torch_native.forward(qr, Tensor(), Tensor(), Tensor::zeros({2, 3}, DType::boolean),
                         paged_ragged(host_ints({0, 2})));
  }, {"mask: not supported with ragged paged queries"});
  for (AttentionKernel* kernel : std::vector<AttentionKernel*>{&torch_native, &flashinfer}) {
    expect_error("int64 indptr past int32", [&] {
      kernel->forward(qr, Tensor(), Tensor(), {}, paged_ragged(host_ints({0, (int64_t(1) << 32) + 2}, DType::i64)));
    }, {"ctx.indptr", "2^31"});
    expect_error("indptr short of N", [&] {
      kernel->forward(qr, Tensor(), Tensor(), {}, paged_ragged(host_ints({0, 1})));
    }, {"ctx.indptr", "== 2"});
    // The metadata has one row: two query rows (torch_native left the second unwritten, or
    // read past the split's end).
    expect_error("indptr rows vs the metadata's", [&] {
      kernel->forward(qr, Tensor(), Tensor(), {}, paged_ragged(host_ints({0, 1, 2})));
    }, {"ctx.indptr", "B = 1 row in the step's metadata"});
    expect_error("query batch vs the metadata's", [&] {
      kernel->forward(Tensor::zeros({2, 2, 1, 64}, DType::f32), Tensor(), Tensor(), {}, decode);
    }, {"query", "1 row"});
  }
}

// The flashinfer backend takes the same strided outputs and index tensors on every route:
// decode wrote through view() (contiguous only), and a strided int32 ctx.indptr reached the
// kernel's contiguous-index check.
void run_strided_out_lse_indptr(Device device, DType dtype) {
  FP_SEEDED_RNG(rng);
  SCOPED_TRACE(device.str() + " " + std::string(dtype_name(dtype)));
  KvCacheConfig cfg = tiny_config();
  cfg.num_pages = 12;
  cfg.dtype = dtype;
  cfg.device = device;
  KvCachePool pool(cfg);
  pool.activate(std::vector<int64_t>{pool.bind_request(12), pool.bind_request(12)});
  const std::vector<int64_t> lengths{7, 10};
  pool.put_ragged(0, std::vector<int64_t>{0, 7, 17}, std::vector<int64_t>{0, 0},
                  random_tensor(rng, {17, 2, 64}, dtype, device),
                  random_tensor(rng, {17, 2, 64}, dtype, device));
  const KvCacheMetadata& meta = pool.metadata(lengths);
  Workspace ws(device, size_t(4) << 20);
  FlashInferAttentionKernel kernel;
  const PagedKv kv = pool.layer(0, meta);
  {
    SCOPED_TRACE("decode, out and lse as transposed views");
    const Tensor q = random_tensor(rng, {2, 4, 1, 64}, dtype, device);
    AttentionContext ctx = AttentionContext::paged(0.0f, false, 4, 2, 64, 0, 0, 1, &pool, &meta, &ws);
    ctx.return_lse = true;
    ctx.lse = poisoned({4, 2, 1}, DType::f32, device).transpose(0, 1);
    Tensor out = poisoned({4, 2, 1, 64}, dtype, device).transpose(0, 1);
    ASSERT_NO_THROW(kernel.forward_into(q, Tensor(), Tensor(), {}, ctx, out));
    const oracle::Result ref = oracle::decode(q.select(2, 0), kv, {});
    expect_output(out.select(2, 0), ref.out, dtype);
    expect_lse(ctx.lse.select(2, 0), ref.lse, dtype);
  }
  {
    SCOPED_TRACE("ragged queries, ctx.indptr a strided int32 view");
    const Tensor qr = random_tensor(rng, {5, 4, 64}, dtype, device);
    const Tensor indptr = host_ints({0, 9, 2, 9, 5}).to(device).as_strided({3}, {2});  // {0, 2, 5}
    const AttentionContext ctx = AttentionContext::paged_ragged(
        0.0f, true, 4, 2, 64, 0, indptr, host_ints({5, 7}, DType::i64), host_ints(lengths, DType::i64),
        &pool, &meta, &ws);
    Tensor out = poisoned({5, 4, 64}, dtype, device);
    ASSERT_NO_THROW(kernel.forward_into(qr, Tensor(), Tensor(), {}, ctx, out));
    expect_output(out, oracle::prefill_paged(qr, host_ints({0, 2, 5}), kv, {}, ctx.params()).out,
                  dtype);
  }
}

TEST(FlashInfer, CpuStridedOutLseAndIndptr) {
  FP_CASE(run_strided_out_lse_indptr(Device::cpu(), DType::f32));
}

TEST(FlashInfer, CudaStridedOutLseAndIndptr) {
  FP_REQUIRE_CUDA();
  FP_CASE(run_strided_out_lse_indptr(cuda0(), DType::bf16));
}

}  // namespace
}  // namespace fpt
