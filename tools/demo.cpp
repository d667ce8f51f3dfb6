// flashpage demo: a small serving loop over the KV page pool — one prefill step over prompts
// of different lengths, then decode steps — run through current_kernel() with the flashinfer
// backend and again with torch_native on gathered contiguous KV, comparing the two.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "cli_args.h"
#include "commands.h"
#include "flashpage/flashpage.h"
#include "random_tensors.h"

namespace flashpage::cli {

namespace {

struct StepResult {
  double fi_ms = 0, tn_ms = 0;
  double max_abs_diff = 0, rel_l2 = 0;
};

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// max |a-b| and ||a-b|| / ||b|| over two tensors of the same shape (read on the host).
void compare(const Tensor& a, const Tensor& b, StepResult& r) {
  const Tensor x = a.to(Device::cpu()).to(DType::f32).contiguous();
  const Tensor y = b.to(Device::cpu()).to(DType::f32).contiguous();
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = double(x.data_as<float>()[i]) - y.data_as<float>()[i];
    r.max_abs_diff = std::max(r.max_abs_diff, std::isnan(d) ? INFINITY : std::fabs(d));
    num += d * d;
    den += double(y.data_as<float>()[i]) * y.data_as<float>()[i];
  }
  r.rel_l2 = std::max(r.rel_l2, std::sqrt(num / std::max(den, 1e-30)));
}

}  // namespace

int run_demo(const std::vector<std::string>& argv) {
  Args args(argv, {"device", "layers", "decode-steps", "seed", "dtype"});
  const Device device = args.has("device") ? parse_device(args.str("device", "")) : default_device();
  const DType dtype = parse_dtype(args.str("dtype", "bf16"));
  const int64_t layers = args.integer("layers", 2, 1);
  const int64_t decode_steps = args.integer("decode-steps", 4, 1);
  std::mt19937_64 rng(uint64_t(args.integer("seed", 2026, 0)));

  const int64_t heads = 16, kv_heads = 4, head_dim = 128, page_size = 16;
  const std::vector<int64_t> prompts = {37, 128, 300, 5, 1000};
  const int64_t batch = int64_t(prompts.size());
  std::printf("flashpage demo on %s: %lld layers, %lld/%lld heads, head_dim %lld, page %lld, %s\n",
              device_description(device).c_str(), (long long)layers, (long long)heads,
              (long long)kv_heads, (long long)head_dim, (long long)page_size,
              std::string(dtype_name(dtype)).c_str());

  KvCacheConfig config;
  config.layers = layers;
  config.kv_heads = kv_heads;
  config.head_dim = head_dim;
  config.page_size = page_size;
  config.num_pages = 256;
  config.dtype = dtype;
  config.device = device;
  KvCachePool pool(config);
  std::vector<int64_t> ids;
  for (int64_t p : prompts) ids.push_back(pool.bind_request(p + decode_steps));
  pool.activate(ids);
  Workspace workspace(device, size_t(64) << 20);
  std::printf("pool: %lld pages, %lld bound to %lld requests (prompts", (long long)config.num_pages,
              (long long)(config.num_pages - pool.free_pages()), (long long)batch);
  for (int64_t p : prompts) std::printf(" %lld", (long long)p);
  std::printf(")\n\n%-8s %6s %7s %14s %16s %14s %10s\n", "step", "batch", "tokens",
              "flashinfer ms", "torch_native ms", "max |diff|", "rel L2");

  const double tolerance = dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 2e-3 : 1e-2;
  bool all_ok = true;
  std::vector<int64_t> lengths(prompts.size(), 0);
  for (int64_t step = 0; step <= decode_steps; ++step) {
    const bool prefill = step == 0;
    std::vector<int64_t> starts = lengths;
    std::vector<int64_t> new_tokens(prompts.size());
    for (size_t b = 0; b < prompts.size(); ++b) new_tokens[b] = prefill ? prompts[b] : 1;
    for (size_t b = 0; b < prompts.size(); ++b) lengths[b] += new_tokens[b];
    const KvCacheMetadata& meta = pool.metadata(lengths);
    int64_t tokens = 0;
    for (int64_t n : new_tokens) tokens += n;
    StepResult r;
    for (int64_t layer = 0; layer < layers; ++layer) {
      // Prefill: ragged prompts [N, H, D] with qo_indptr; decode: [B, H, 1, D].
      Tensor q, k, v, qo_indptr, start_positions, cache_lens;
      AttentionContext ctx;
      if (prefill) {
        q = random_normal({tokens, heads, head_dim}, dtype, device, rng);
        k = random_normal({tokens, kv_heads, head_dim}, dtype, device, rng);
        v = random_normal({tokens, kv_heads, head_dim}, dtype, device, rng);
        qo_indptr = Tensor::empty({batch + 1}, DType::i32);
        start_positions = Tensor::empty({batch}, DType::i64);
        cache_lens = Tensor::empty({batch}, DType::i64);
        qo_indptr.data_as<int32_t>()[0] = 0;
        for (int64_t b = 0; b < batch; ++b) {
          qo_indptr.data_as<int32_t>()[b + 1] =
              int32_t(qo_indptr.data_as<int32_t>()[b] + new_tokens[size_t(b)]);
          start_positions.data_as<int64_t>()[b] = starts[size_t(b)];
          cache_lens.data_as<int64_t>()[b] = lengths[size_t(b)];
        }
        ctx = AttentionContext::paged_ragged(0.0f, true, heads, kv_heads, head_dim, layer,
                                             qo_indptr.to(device), start_positions, cache_lens,
                                             &pool, &meta, &workspace);
      } else {
        q = random_normal({batch, heads, 1, head_dim}, dtype, device, rng);
        k = random_normal({batch, kv_heads, 1, head_dim}, dtype, device, rng);
        v = random_normal({batch, kv_heads, 1, head_dim}, dtype, device, rng);
        // One new token per row, but the rows have different lengths: the uniform context's
        // single start_pos cannot place them, so the step's tokens go in with per-row start
        // positions first and the context only reads (key/value undefined below).
        ctx = AttentionContext::paged(0.0f, false, heads, kv_heads, head_dim, layer, 0, 1,
                                      &pool, &meta, &workspace);
        Tensor k_new = k.transpose(1, 2), v_new = v.transpose(1, 2);
        pool.put(layer, starts, k_new, v_new);
      }
      Tensor out_fi = Tensor::empty(q.shape(), dtype, device);
      Tensor out_tn = Tensor::empty(q.shape(), dtype, device);
      out_fi.fill_(NAN);
      out_tn.fill_(NAN);
      // Prefill writes this step's K/V through the context; decode wrote them above.
      const Tensor& k_in = prefill ? k : Tensor();
      const Tensor& v_in = prefill ? v : Tensor();
      synchronize(device);
      auto t0 = std::chrono::steady_clock::now();
      install_backend(AttentionBackend::FlashInfer).forward_into(q, k_in, v_in, {}, ctx, out_fi);
      synchronize(device);
      r.fi_ms += elapsed_ms(t0);
      t0 = std::chrono::steady_clock::now();
      // The step's tokens are in the pool now: torch_native only reads.
      install_backend(AttentionBackend::TorchNative).forward_into(q, {}, {}, {}, ctx, out_tn);
      synchronize(device);
      r.tn_ms += elapsed_ms(t0);
      compare(out_fi, out_tn, r);
    }
    install_backend(AttentionBackend::FlashInfer);
    const bool ok = r.rel_l2 < tolerance && std::isfinite(r.max_abs_diff);
    all_ok = all_ok && ok;
    std::printf("%-8s %6lld %7lld %14.3f %16.3f %14.3g %10.2e%s\n",
                prefill ? "prefill" : ("decode " + std::to_string(step)).c_str(), (long long)batch,
                (long long)tokens, r.fi_ms, r.tn_ms, r.max_abs_diff, r.rel_l2, ok ? "" : "  <-- MISMATCH");
  }
  std::printf("\n%s: flashinfer (pages read in place) and torch_native (gathered contiguous KV) "
              "%s within the %s budget (rel L2 < %.0e) over %lld layers x %lld steps.\n",
              all_ok ? "OK" : "FAIL", all_ok ? "agree" : "DISAGREE",
              std::string(dtype_name(dtype)).c_str(), tolerance, (long long)layers,
              (long long)(decode_steps + 1));
  return all_ok ? 0 : 1;
}

}  // namespace flashpage::cli
