// Paged batch decode throughput on the GPU: one JSON object per line on stdout.
//   decode_bench [--heads 32/8/128,64/8/128] [--shapes 1x32768,64xrand] [--pages 16,1]
//                [--reps N] [--min-ms T]
// Each case builds a random bf16 paged KV cache with shuffled page ids, plans once, warms up,
// then times batch_decode alone with CUDA events; the median is reported. Caches smaller than
// kRotateBytes are replicated into several pools used in turn, so L2 (60 MB) cannot serve them.
// TB/s counts K+V bytes read plus q and out bytes, decimal.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "flashpage/flashpage.h"

namespace {

using namespace flashpage;
using bench::fill_random;
using bench::split;

constexpr double kRotateBytes = 200e6;   // below this the cache is replicated (L2 is 60 MB)
constexpr int kMaxPools = 8;
constexpr int kWarmup = 5;
constexpr uint64_t kLengthSeed = 1234;   // the random-length case is the same in every run
constexpr int64_t kRandomMaxLen = 8192;

struct Heads {
  int64_t hq, hkv, d;
};
struct Shape2 {
  int64_t batch;
  int64_t len;  // 0: lengths uniform in 1..kRandomMaxLen
};

std::string json_lengths(const std::vector<int64_t>& lengths) {
  std::string s = "[";
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(lengths[i]);
  }
  return s + "]";
}

// The kernel the library picks, or the one FLASHPAGE_DECODE_KERNEL forces (A/B runs);
// FLASHPAGE_BENCH_LABEL names a variant set by other knobs.
std::string system_name() {
  if (const char* label = std::getenv("FLASHPAGE_BENCH_LABEL"); label != nullptr && *label)
    return label;
  const char* forced = std::getenv("FLASHPAGE_DECODE_KERNEL");
  std::string name = "flashpage";
  if (forced != nullptr && *forced) name.append("_").append(forced);
  return name;
}

void run_case(const Heads& h, const Shape2& shape, int64_t page_size, int reps_wanted,
              double min_ms, const std::vector<uint16_t>& pattern) {
  const Device gpu = Device::cuda(0);
  std::vector<int64_t> lengths(static_cast<size_t>(shape.batch), shape.len);
  if (shape.len == 0) {
    std::mt19937_64 rng(kLengthSeed);
    std::uniform_int_distribution<int64_t> dist(1, kRandomMaxLen);
    for (auto& len : lengths) len = dist(rng);
  }
  const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  int64_t num_pages = 0;
  for (int64_t len : lengths) num_pages += (len + page_size - 1) / page_size;

  // CSR table over shuffled page ids.
  std::vector<int32_t> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  // FLASHPAGE_BENCH_PAGE_ORDER=sequential keeps page ids in order (an experiment: how much
  // the scattered pages themselves cost).
  const char* order = std::getenv("FLASHPAGE_BENCH_PAGE_ORDER");
  if (order == nullptr || std::string(order) != "sequential")
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(kLengthSeed + uint64_t(page_size)));
  PageTable host;
  host.indptr = Tensor::empty({shape.batch + 1}, DType::i32);
  host.indices = Tensor::from_blob(ids.data(), {num_pages}, DType::i32).clone();
  host.last_page_len = Tensor::empty({shape.batch}, DType::i32);
  int32_t* indptr = host.indptr.data_as<int32_t>();
  indptr[0] = 0;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t pages = (lengths[size_t(b)] + page_size - 1) / page_size;
    indptr[b + 1] = indptr[b] + int32_t(pages);
    host.last_page_len.data_as<int32_t>()[b] = int32_t(lengths[size_t(b)] - (pages - 1) * page_size);
  }
  const PageTable device_table = host.to(gpu);

  // FLASHPAGE_BENCH_KV_LAYOUT=hnd stores the pages head-major (an experiment: a block of
  // fewer than all KV heads reads whole 4 KB runs instead of part of each token's row).
  const char* layout_knob = std::getenv("FLASHPAGE_BENCH_KV_LAYOUT");
  const KvLayout layout =
      layout_knob != nullptr && std::string(layout_knob) == "hnd" ? KvLayout::HND : KvLayout::NHD;
  const Shape page_shape = layout == KvLayout::HND ? Shape{num_pages, h.hkv, page_size, h.d}
                                                   : Shape{num_pages, page_size, h.hkv, h.d};
  const double kv_bytes = double(tokens) * double(h.hkv * h.d) * 2.0 * 2.0;  // K + V, bf16
  const int pools = kv_bytes >= kRotateBytes
                        ? 1
                        : std::min(kMaxPools, int((kRotateBytes + kv_bytes - 1) / kv_bytes));
  std::vector<PagedKv> kvs(static_cast<size_t>(pools));
  for (auto& kv : kvs) {
    kv.k_pages = Tensor::empty(page_shape, DType::bf16, gpu);
    kv.v_pages = Tensor::empty(page_shape, DType::bf16, gpu);
    kv.layout = layout;
    kv.table = device_table;
    fill_random(kv.k_pages.data(), kv.k_pages.nbytes(), pattern);
    fill_random(kv.v_pages.data(), kv.v_pages.nbytes(), pattern);
  }
  Tensor q = Tensor::empty({shape.batch, h.hq, h.d}, DType::bf16, gpu);
  fill_random(q.data(), q.nbytes(), pattern);
  Tensor out = Tensor::empty({shape.batch, h.hq, h.d}, DType::bf16, gpu);

  Workspace ws(gpu);
  const Plan plan = plan_decode(ws, host, kvs[0], h.hq);
  const AttentionParams params{};
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BENCH_CUDA(cudaDeviceSynchronize());

  const bench::Timing t = bench::time_calls(
      [&](int r) { batch_decode(ws, plan, q, kvs[size_t(r % pools)], params, out, {}, stream); },
      stream, reps_wanted, min_ms, kWarmup);
  const double median = t.median_us;
  const int reps = t.reps;
  const double bytes = kv_bytes + 2.0 * double(shape.batch * h.hq * h.d) * 2.0;
  std::printf(
      "{\"system\":\"%s\",\"hq\":%lld,\"hkv\":%lld,\"d\":%lld,\"batch\":%lld,"
      "\"seq_len\":%s,\"page_size\":%lld,\"kv_tokens\":%lld,\"bytes\":%.0f,\"us\":%.3f,"
      "\"us_min\":%.3f,\"tb_s\":%.4f,\"reps\":%d,\"pools\":%d,\"num_work\":%lld,"
      "\"num_partials\":%lld,\"grid\":%lld,\"host_us\":%.2f,\"lengths\":%s}\n",
      system_name().c_str(), (long long)h.hq, (long long)h.hkv, (long long)h.d,
      (long long)shape.batch, shape.len == 0 ? "\"rand1-8192\"" : std::to_string(shape.len).c_str(),
      (long long)page_size, (long long)tokens, bytes, median, t.min_us, bytes / (median * 1e-6) / 1e12,
      reps, pools, (long long)plan.num_work, (long long)plan.num_partials, (long long)plan.grid,
      t.host_us, shape.len == 0 ? json_lengths(lengths).c_str() : "null");
  std::fflush(stdout);
  // FLASHPAGE_DECODE_ABLATE with bit 2 (and bit 1): one more call whose kernel writes each
  // block's SM, start and end into the (zeroed) LSE output; printed to stderr as JSON. Rows
  // the planner leaves whole write their LSE there too: read shapes whose rows are all cut
  // (64 x 4096 and longer; bench/block_times.py drops records that are not plausible).
  const char* ablate = std::getenv("FLASHPAGE_DECODE_ABLATE");
  if (ablate != nullptr && (std::atoi(ablate) & 4) && shape.batch * h.hq >= 3 * plan.grid) {
    Tensor lse = Tensor::empty({shape.batch, h.hq}, DType::f32, gpu);
    BENCH_CUDA(cudaMemsetAsync(lse.data(), 0, lse.nbytes(), stream));
    batch_decode(ws, plan, q, kvs[0], params, out, lse, stream);
    BENCH_CUDA(cudaStreamSynchronize(stream));
    const Tensor host_lse = lse.to(Device::cpu());
    const uint32_t* rec = static_cast<const uint32_t*>(host_lse.data());
    std::string blocks;
    for (int64_t k = 0; k < plan.grid; ++k) {
      const uint32_t* r = rec + 3 * k;
      blocks += (k ? ",[" : "[") + std::to_string(r[0]) + "," + std::to_string(r[1]) + "," +
                std::to_string(r[2]) + "]";
    }
    std::fprintf(stderr,
                 "{\"block_times\":{\"hq\":%lld,\"hkv\":%lld,\"d\":%lld,\"batch\":%lld,"
                 "\"seq_len\":%lld,\"page_size\":%lld,\"blocks\":[%s]}}\n",
                 (long long)h.hq, (long long)h.hkv, (long long)h.d, (long long)shape.batch,
                 (long long)shape.len, (long long)page_size, blocks.c_str());
  }
  BENCH_CUDA(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  std::string heads_arg = "32/8/128,64/8/128,32/32/128,16/2/256";
  std::string shapes_arg = "1x32768,16x8192,64x4096,128x2048,256x1024,64x512,64xrand";
  std::string pages_arg = "16,1";
  int reps = 0;
  double min_ms = 200.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: expected a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--heads") heads_arg = value();
    else if (a == "--shapes") shapes_arg = value();
    else if (a == "--pages") pages_arg = value();
    else if (a == "--reps") reps = std::atoi(value().c_str());
    else if (a == "--min-ms") min_ms = std::atof(value().c_str());
    else {
      std::fprintf(stderr,
                   "usage: decode_bench [--heads Hq/Hkv/D,...] [--shapes BxL|Bxrand,...] "
                   "[--pages 16,1] [--reps N] [--min-ms T]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (!flashpage::cuda_available()) {
    std::fprintf(stderr, "decode_bench: no CUDA device\n");
    return 1;
  }
  std::vector<Heads> heads;
  for (const auto& s : split(heads_arg, ',')) {
    const auto p = split(s, '/');
    if (p.size() != 3) { std::fprintf(stderr, "--heads: expected Hq/Hkv/D, got %s\n", s.c_str()); return 2; }
    heads.push_back({std::atoll(p[0].c_str()), std::atoll(p[1].c_str()), std::atoll(p[2].c_str())});
  }
  std::vector<Shape2> shapes;
  for (const auto& s : split(shapes_arg, ',')) {
    const auto p = split(s, 'x');
    if (p.size() != 2) { std::fprintf(stderr, "--shapes: expected BxL, got %s\n", s.c_str()); return 2; }
    shapes.push_back({std::atoll(p[0].c_str()), p[1] == "rand" ? 0 : std::atoll(p[1].c_str())});
  }
  std::vector<int64_t> pages;
  for (const auto& s : split(pages_arg, ',')) pages.push_back(std::atoll(s.c_str()));

  const std::vector<uint16_t> pattern = bench::random_bf16_pattern();

  int failures = 0;
  for (const auto& h : heads)
    for (const auto& shape : shapes)
      for (int64_t page : pages) {
        try {
          run_case(h, shape, page, reps, min_ms, pattern);
        } catch (const std::exception& e) {
          ++failures;
          std::string msg = e.what();
          std::replace(msg.begin(), msg.end(), '"', '\'');
          std::printf("{\"system\":\"%s\",\"hq\":%lld,\"hkv\":%lld,\"d\":%lld,\"batch\":%lld,"
                      "\"seq_len\":%s,\"page_size\":%lld,\"error\":\"%s\"}\n",
                      system_name().c_str(), (long long)h.hq, (long long)h.hkv, (long long)h.d, (long long)shape.batch,
                      shape.len == 0 ? "\"rand1-8192\"" : std::to_string(shape.len).c_str(),
                      (long long)page, msg.c_str());
          std::fflush(stdout);
        }
      }
  return failures == 0 ? 0 : 1;
}
