// flashpage bench: times paged decode (qo-len 1) or prefill (qo-len > 1) on one device and
// prints time, GB/s, GFLOP/s and ratios against yardsticks measured in the same run: the
// machine's memory bandwidth, and the torch_native path (gather pages + SDPA).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include "cli_args.h"
#include "commands.h"
#include "flashpage/flashpage.h"
#include "memory_bandwidth.h"
#include "random_tensors.h"

namespace flashpage::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Problem {
  int64_t batch, kv_len, qo_len, heads, kv_heads, head_dim, page_size;
  KvLayout layout;
  DType dtype;
  Device device;
};

// Median seconds of `reps` runs of fn after `warmup` runs; progress on stderr for long runs.
template <class Fn>
double time_median(const char* what, int64_t warmup, int64_t reps, Device device, Fn&& fn) {
  for (int64_t i = 0; i < warmup; ++i) fn();
  synchronize(device);
  std::vector<double> t;
  const auto start = Clock::now();
  for (int64_t i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    synchronize(device);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (std::chrono::duration<double>(Clock::now() - start).count() > 2.0)
      std::fprintf(stderr, "\r  %s: %lld/%lld", what, (long long)(i + 1), (long long)reps);
  }
  if (std::chrono::duration<double>(Clock::now() - start).count() > 2.0) std::fprintf(stderr, "\n");
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int run_bench(const std::vector<std::string>& argv) {
  Args args(argv, {"batch", "kv-len", "qo-len", "heads", "kv-heads", "head-dim", "page-size",
                   "layout", "dtype", "device", "backend", "reps", "warmup", "seed"});
  Problem p;
  p.batch = args.integer("batch", 8, 1);
  p.kv_len = args.integer("kv-len", 4096, 1);
  p.qo_len = args.integer("qo-len", 1, 1);
  p.heads = args.integer("heads", 32, 1);
  p.kv_heads = args.integer("kv-heads", 8, 1);
  p.head_dim = args.integer("head-dim", 128, 8);
  p.page_size = args.integer("page-size", 16, 1);
  p.layout = parse_layout(args.str("layout", "nhd"));
  p.dtype = parse_dtype(args.str("dtype", "bf16"));
  p.device = args.has("device") ? parse_device(args.str("device", "")) : default_device();
  const std::string backend = args.str("backend", "both");
  if (backend != "both" && backend != "flashinfer" && backend != "torch_native")
    throw UsageError("--backend expects flashinfer|torch_native|both, got '" + backend + "'");
  const bool decode = p.qo_len == 1;
  const int64_t reps = args.integer("reps", decode ? 50 : 10, 1);
  const int64_t warmup = args.integer("warmup", 3, 0);
  std::mt19937_64 rng(uint64_t(args.integer("seed", 1, 0)));
  if (p.qo_len > p.kv_len) throw UsageError("--qo-len must not exceed --kv-len");

  // Pages of all rows, shuffled, with one spare page so ids are not simply 0..n-1.
  const int64_t pages_per_row = (p.kv_len + p.page_size - 1) / p.page_size;
  const int64_t num_pages = p.batch * pages_per_row + 1;
  const Shape page_shape = p.layout == KvLayout::NHD
                               ? Shape{num_pages, p.page_size, p.kv_heads, p.head_dim}
                               : Shape{num_pages, p.kv_heads, p.page_size, p.head_dim};
  std::fprintf(stderr, "  preparing %.1f MB of KV...\n",
               2.0 * double(num_pages) * p.page_size * p.kv_heads * p.head_dim *
                   double(dtype_size(p.dtype)) / 1e6);
  PagedKv kv;
  kv.layout = p.layout;
  kv.k_pages = random_normal(page_shape, p.dtype, p.device, rng);
  kv.v_pages = random_normal(page_shape, p.dtype, p.device, rng);
  std::vector<int32_t> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  PageTable host;
  host.indptr = Tensor::empty({p.batch + 1}, DType::i32);
  host.indices = Tensor::empty({p.batch * pages_per_row}, DType::i32);
  host.last_page_len = Tensor::empty({p.batch}, DType::i32);
  for (int64_t b = 0; b <= p.batch; ++b) host.indptr.data_as<int32_t>()[b] = int32_t(b * pages_per_row);
  for (int64_t i = 0; i < p.batch * pages_per_row; ++i) host.indices.data_as<int32_t>()[i] = ids[size_t(i)];
  for (int64_t b = 0; b < p.batch; ++b)
    host.last_page_len.data_as<int32_t>()[b] = int32_t(p.kv_len - (pages_per_row - 1) * p.page_size);
  kv.table = host.to(p.device);

  const Shape q_shape = decode ? Shape{p.batch, p.heads, p.head_dim}
                               : Shape{p.batch, p.heads, p.qo_len, p.head_dim};
  const Tensor q = random_normal(q_shape, p.dtype, p.device, rng);
  Tensor out = Tensor::empty(q_shape, p.dtype, p.device);
  AttentionParams params;
  params.causal = !decode;

  const double es = double(dtype_size(p.dtype));
  const double kv_bytes = 2.0 * double(p.batch) * p.kv_len * p.kv_heads * p.head_dim * es;
  const double io_bytes = kv_bytes + 2.0 * double(q.numel()) * es;
  // Unmasked (query, key) pairs under bottom-right causal: query i sees kv_len - qo_len + i + 1.
  double pairs = 0;
  for (int64_t i = 0; i < p.qo_len; ++i) pairs += double(p.kv_len - p.qo_len + i + 1);
  const double flops = 4.0 * double(p.batch) * p.heads * p.head_dim * pairs;

  std::printf("flashpage bench on %s: %s, B=%lld L=%lld S=%lld, %lld/%lld heads, D=%lld, "
              "page %lld %s, %s\n",
              device_description(p.device).c_str(), decode ? "decode" : "prefill (causal)",
              (long long)p.batch, (long long)p.kv_len, (long long)p.qo_len, (long long)p.heads,
              (long long)p.kv_heads, (long long)p.head_dim, (long long)p.page_size,
              std::string(layout_name(p.layout)).c_str(), std::string(dtype_name(p.dtype)).c_str());
  const Bandwidth bw = measure_memory_bandwidth(p.device);
  std::printf("yardstick: %s %.1f GB/s\n", bw.what.c_str(), bw.gb_per_s);
  std::printf("%-34s %12s %10s %10s %12s\n", "system", "median ms", "GB/s", "GFLOP/s",
              decode ? "of bandwidth" : "");

  double fi_s = 0, tn_s = 0;
  auto report = [&](const char* name, double s) {
    std::printf("%-34s %12.3f %10.1f %10.1f", name, s * 1e3, io_bytes / s / 1e9, flops / s / 1e9);
    if (decode) std::printf(" %11.0f%%", 100.0 * io_bytes / s / 1e9 / bw.gb_per_s);
    std::printf("\n");
  };
  if (backend != "torch_native") {
    Workspace ws(p.device);
    const Plan plan = decode ? plan_decode(ws, host, kv, p.heads)
                             : plan_prefill(ws, {}, host, kv, p.qo_len, p.heads);
    fi_s = time_median("flashinfer", warmup, reps, p.device, [&] {
      if (decode)
        batch_decode(ws, plan, q, kv, params, out);
      else
        batch_prefill_paged(ws, plan, q, {}, kv, {}, params, out);
    });
    report("flashpage paged (flashinfer)", fi_s);
  }
  const bool sdpa_can_match = decode || p.qo_len == p.kv_len;  // SDPA's causal is top-left
  if (backend != "flashinfer" && !sdpa_can_match)
    std::printf("%-34s (skipped: S < L needs bottom-right causal, which SDPA lacks)\n",
                "gather + sdpa (torch_native path)");
  if (backend != "flashinfer" && sdpa_can_match) {
    // The seed's path: gather the pages into contiguous K/V, then SDPA per row.
    Tensor k_all = Tensor::empty({p.batch * p.kv_len, p.kv_heads, p.head_dim}, p.dtype, p.device);
    Tensor v_all = Tensor::empty(k_all.shape(), p.dtype, p.device);
    const Tensor q4 = decode ? q.view({p.batch, p.heads, 1, p.head_dim}) : q;
    Tensor out4 = decode ? out.view({p.batch, p.heads, 1, p.head_dim}) : out;
    AttentionParams sdpa_params = params;
    sdpa_params.causal = !decode;  // S == L here, where top-left equals bottom-right
    tn_s = time_median("torch_native", warmup, std::max<int64_t>(reps / 5, 3), p.device, [&] {
      gather_paged_kv(kv, k_all, v_all);
      Tensor k4 = k_all.view({p.batch, p.kv_len, p.kv_heads, p.head_dim}).transpose(1, 2);
      Tensor v4 = v_all.view({p.batch, p.kv_len, p.kv_heads, p.head_dim}).transpose(1, 2);
      sdpa(q4, k4, v4, {}, sdpa_params, out4);
    });
    report("gather + sdpa (torch_native path)", tn_s);
  }
  if (fi_s > 0 && tn_s > 0)
    std::printf("ratio: flashpage paged is %.2fx the torch_native path\n", tn_s / fi_s);
  if (decode && fi_s > 0)
    std::printf("decode reads KV at %.1f GB/s = %.0f%% of the measured %s\n",
                kv_bytes / fi_s / 1e9, 100.0 * kv_bytes / fi_s / 1e9 / bw.gb_per_s, bw.what.c_str());
  return 0;
}

}  // namespace flashpage::cli
