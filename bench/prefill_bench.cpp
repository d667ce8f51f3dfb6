// Prefill throughput on the GPU: one JSON object per line on stdout.
//   prefill_bench [--heads 32/8/128,...] [--shapes 1x8192,...] [--cache 16x512+4096]
//                 [--mixed 1x8192+16x512,...] [--systems ragged,contiguous,paged16,paged1]
//                 [--min-ms T] [--causal no|yes|both]
// ("none" for --shapes or --cache leaves that kind of case out; any pagedN system reads
// pages of N tokens)
// For every (heads, B x S, causal) it times flashpage's ragged prefill over contiguous K/V
// (the vision-tower path), its sdpa on [B, H, S, D] tensors (contiguous: PyTorch's layout;
// top-left causal, so only where that is the same mask: S = L or not causal) and its paged
// prefill reading K/V from shuffled pages of 16 and of 1 token. The cache case B x S+C runs
// S new tokens per row over C cached ones (paged and ragged, causal bottom-right). A mixed
// case (--mixed, none by default) is one batch of rows of different lengths, as an engine's
// prefill step has: "1x8192+16x512" is one row of 8192 tokens and 16 of 512 (S = L each,
// rows in a fixed shuffled order), paged and ragged only; its JSON rows carry "mix" (batch:
// the row count, qo_len and kv_len: the longest row) and no PyTorch yardstick.
// FLOPs = 4 * Hq * D * (query, key) pairs that the mask keeps over all rows; TFLOP/s from the median
// of event-timed calls, each system timed after min_ms of its own calls (the GPU at its
// sustained clocks, bench_util.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "cuda/prefill_select.h"  // which kernel the timed calls ran
#include "flashpage/flashpage.h"

namespace {

using namespace flashpage;

struct Case {
  int64_t hq, hkv, d, batch, qo_len, kv_len;
  bool causal;
  std::string mix;                // a mixed case's spec ("" for uniform rows)
  std::vector<int64_t> mix_rows;  // its rows' lengths (S = L), in batch order
};

// (query tokens, keys) of each row.
std::vector<std::pair<int64_t, int64_t>> row_lengths(const Case& c) {
  if (c.mix.empty()) return std::vector<std::pair<int64_t, int64_t>>(size_t(c.batch), {c.qo_len, c.kv_len});
  std::vector<std::pair<int64_t, int64_t>> rows;
  for (int64_t n : c.mix_rows) rows.emplace_back(n, n);
  return rows;
}

// Query-key pairs the mask keeps, over all rows.
double unmasked_pairs(const Case& c) {
  double pairs = 0;
  for (const auto& [qo_len, kv_len] : row_lengths(c)) {
    if (!c.causal) {
      pairs += double(qo_len) * double(kv_len);
      continue;
    }
    // bottom-right: query i sees kv_len - qo_len + i + 1 keys
    for (int64_t i = 0; i < qo_len; ++i) pairs += double(std::min(kv_len, kv_len - qo_len + i + 1));
  }
  return pairs;
}

// "1x8192+16x512" -> the rows' lengths, shuffled (a fixed order, so that passes compare).
std::vector<int64_t> parse_mix(const std::string& spec) {
  std::vector<int64_t> rows;
  for (const auto& group : bench::split(spec, '+')) {
    const auto p = bench::split(group, 'x');
    const int64_t count = p.size() == 2 ? std::atoll(p[0].c_str()) : 0;
    const int64_t len = p.size() == 2 ? std::atoll(p[1].c_str()) : 0;
    if (count < 1 || len < 1)
      throw std::runtime_error("--mixed: expected groups COUNTxLEN joined by '+', got '" + spec + "'");
    rows.insert(rows.end(), size_t(count), len);
  }
  std::shuffle(rows.begin(), rows.end(), std::mt19937_64(7));
  return rows;
}

// Wall-clock time of a result line, to line it up with bench/device_run.sh's MONITOR log.
long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void print_result(const Case& c, const char* system_base, int64_t page_size, const bench::Timing& t,
                  const char* error) {
  // FLASHPAGE_BENCH_LABEL tags a variant run (e.g. FLASHPAGE_PREFILL_KERNEL=tc) in one file.
  std::string system = system_base;
  if (const char* label = std::getenv("FLASHPAGE_BENCH_LABEL"); label != nullptr && *label)
    system.append("_").append(label);
  const std::string mix = c.mix.empty() ? "" : "\"mix\":\"" + c.mix + "\",";
  // The case's fields, then either its error or its timing.
  std::printf("{%s\"system\":\"%s\",\"hq\":%lld,\"hkv\":%lld,\"d\":%lld,\"batch\":%lld,\"qo_len\":%lld,"
              "\"kv_len\":%lld,\"causal\":%s,\"page_size\":%lld,",
              mix.c_str(), system.c_str(), (long long)c.hq, (long long)c.hkv, (long long)c.d, (long long)c.batch,
              (long long)c.qo_len, (long long)c.kv_len, c.causal ? "true" : "false", (long long)page_size);
  if (error) {
    std::printf("\"error\":\"%s\"}\n", error);
  } else {
    const double flops = 4.0 * double(c.hq * c.d) * unmasked_pairs(c);
    std::printf("\"flops\":%.0f,\"us\":%.3f,\"us_min\":%.3f,\"tflops\":%.2f,\"reps\":%d,\"unix_ms\":%lld,"
                "\"kernel\":\"%s\"}\n",
                flops, t.median_us, t.min_us, flops / (t.median_us * 1e-6) / 1e12, t.reps, unix_ms(),
                flashpage::cuda::last_prefill_kernel());
  }
  std::fflush(stdout);
}

Tensor random_bf16(const Shape& shape, const std::vector<uint16_t>& pattern) {
  Tensor t = Tensor::empty(shape, DType::bf16, Device::cuda(0));
  bench::fill_random(t.data(), t.nbytes(), pattern);
  return t;
}

Tensor int_tensor(const std::vector<int32_t>& v, Device device) {
  return Tensor::from_blob(const_cast<int32_t*>(v.data()), {int64_t(v.size())}, DType::i32)
      .clone()
      .to(device);
}

void run_case(const Case& c, const std::vector<std::string>& systems, double min_ms,
              const std::vector<uint16_t>& pattern, cudaStream_t stream) {
  const Device gpu = Device::cuda(0);
  AttentionParams params;
  params.causal = c.causal;
  const auto rows = row_lengths(c);
  std::vector<int32_t> qo(rows.size() + 1, 0), kvp(rows.size() + 1, 0);
  for (size_t b = 0; b < rows.size(); ++b) {
    qo[b + 1] = qo[b] + int32_t(rows[b].first);
    kvp[b + 1] = kvp[b] + int32_t(rows[b].second);
  }
  const int64_t nq = qo.back(), nkv = kvp.back();
  Tensor q = random_bf16({nq, c.hq, c.d}, pattern);
  Tensor out = Tensor::empty({nq, c.hq, c.d}, DType::bf16, gpu);
  const Tensor qo_host = int_tensor(qo, Device::cpu()), qo_dev = qo_host.to(gpu);
  // Every system: min_ms of its own calls first, then ~min_ms timed (bench_util.h).
  auto timed = [&](auto&& call) { return bench::time_calls(call, stream, 0, min_ms, 5, min_ms); };
  for (const std::string& system : systems) {
    try {
      if (system == "ragged") {
        Tensor k = random_bf16({nkv, c.hkv, c.d}, pattern), v = random_bf16({nkv, c.hkv, c.d}, pattern);
        const Tensor kv_dev = int_tensor(kvp, gpu);
        const auto t =
            timed([&](int) { batch_prefill_ragged(q, k, v, qo_dev, kv_dev, params, out, {}, stream); });
        print_result(c, "flashpage_ragged", 0, t, nullptr);
        continue;
      }
      if (system == "contiguous") {
        // Top-left != bottom-right where S < L; [B, H, S, D] needs uniform rows.
        if ((c.causal && c.qo_len != c.kv_len) || !c.mix.empty()) continue;
        Tensor qc = random_bf16({c.batch, c.hq, c.qo_len, c.d}, pattern);
        Tensor kc = random_bf16({c.batch, c.hkv, c.kv_len, c.d}, pattern);
        Tensor vc = random_bf16({c.batch, c.hkv, c.kv_len, c.d}, pattern);
        Tensor oc = Tensor::empty({c.batch, c.hq, c.qo_len, c.d}, DType::bf16, gpu);
        const auto t = timed([&](int) { sdpa(qc, kc, vc, {}, params, oc, {}, stream); });
        print_result(c, "flashpage_contiguous", 0, t, nullptr);
        continue;
      }
      // "pagedN": shuffled pages of N tokens (paged16 and paged1 are the issue's).
      if (system.rfind("paged", 0) != 0) throw std::runtime_error("unknown system " + system);
      const int64_t page = std::stoll(system.substr(5));
      if (page < 1) throw std::runtime_error("pagedN: expected N >= 1 tokens a page, got " + system);
      std::vector<int32_t> indptr(rows.size() + 1, 0), last(rows.size());
      for (size_t b = 0; b < rows.size(); ++b) {
        const int64_t pages_per_row = (rows[b].second + page - 1) / page;
        indptr[b + 1] = indptr[b] + int32_t(pages_per_row);
        last[b] = int32_t(rows[b].second - (pages_per_row - 1) * page);
      }
      const int64_t num_pages = indptr.back();
      std::vector<int32_t> ids(static_cast<size_t>(num_pages));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), std::mt19937_64(99));
      PageTable host{int_tensor(indptr, Device::cpu()), int_tensor(ids, Device::cpu()),
                     int_tensor(last, Device::cpu())};
      PagedKv kv;
      kv.k_pages = random_bf16({num_pages, page, c.hkv, c.d}, pattern);
      kv.v_pages = random_bf16({num_pages, page, c.hkv, c.d}, pattern);
      kv.table = host.to(gpu);
      Workspace ws(gpu);
      const Plan plan = plan_prefill(ws, qo_host, host, kv, 0, c.hq);
      const auto t =
          timed([&](int) { batch_prefill_paged(ws, plan, q, qo_dev, kv, {}, params, out, {}, stream); });
      print_result(c, ("flashpage_" + system).c_str(), page, t, nullptr);
    } catch (const std::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '"', '\'');
      print_result(c, ("flashpage_" + system).c_str(), 0, {}, msg.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string heads_arg = "32/8/128,32/32/128,16/16/256,32/32/64";
  std::string shapes_arg = "1x8192,8x2048,16x1024,64x512";
  std::string cache_arg = "16x512+4096";
  std::string mixed_arg = "none";
  std::string systems_arg = "ragged,contiguous,paged16,paged1";
  double min_ms = 100.0;
  std::string causal_arg = "both";  // no | yes | both (one kind alone: profiling runs)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--heads" && has_value) heads_arg = argv[++i];
    else if (a == "--shapes" && has_value) shapes_arg = argv[++i];
    else if (a == "--cache" && has_value) cache_arg = argv[++i];
    else if (a == "--mixed" && has_value) mixed_arg = argv[++i];
    else if (a == "--systems" && has_value) systems_arg = argv[++i];
    else if (a == "--min-ms" && has_value) min_ms = std::atof(argv[++i]);
    else if (a == "--causal" && has_value) causal_arg = argv[++i];
    else {
      std::fprintf(stderr, "usage: prefill_bench [--heads Hq/Hkv/D,...] [--shapes BxS,...] "
                           "[--cache BxS+C,...] [--mixed NxS+MxT,...] [--systems ragged,contiguous,paged16,paged1] [--min-ms T] [--causal no|yes|both]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  // Any other value would match no shape and the run would end with no rows and rc 0
  // (session 34's first A/B passed `--causal false`).
  if (causal_arg != "no" && causal_arg != "yes" && causal_arg != "both") {
    std::fprintf(stderr, "prefill_bench: --causal takes no, yes or both, not '%s'\n",
                 causal_arg.c_str());
    return 2;
  }
  std::vector<std::pair<std::string, std::vector<int64_t>>> mixes;  // --mixed, parsed up front
  try {
    for (const auto& spec : bench::split(mixed_arg == "none" ? "" : mixed_arg, ','))
      mixes.emplace_back(spec, parse_mix(spec));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefill_bench: %s\n", e.what());
    return 2;
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "prefill_bench: no CUDA device\n");
    return 1;
  }
  const auto pattern = bench::random_bf16_pattern();
  const auto systems = bench::split(systems_arg, ',');
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto& hs : bench::split(heads_arg, ',')) {
    const auto h = bench::split(hs, '/');
    if (h.size() != 3) return 2;
    const int64_t hq = std::atoll(h[0].c_str()), hkv = std::atoll(h[1].c_str()), d = std::atoll(h[2].c_str());
    for (const auto& ss : bench::split(shapes_arg == "none" ? "" : shapes_arg, ',')) {
      const auto p = bench::split(ss, 'x');
      if (p.size() != 2) return 2;
      const int64_t b = std::atoll(p[0].c_str()), s = std::atoll(p[1].c_str());
      for (bool causal : {false, true})
        if (causal_arg == "both" || causal_arg == (causal ? "yes" : "no"))
          run_case({hq, hkv, d, b, s, s, causal, {}, {}}, systems, min_ms, pattern, stream);
    }
    for (const auto& cs : bench::split(cache_arg == "none" ? "" : cache_arg, ',')) {  // BxS+C
      const auto p = bench::split(cs, 'x');
      const auto sc = p.size() == 2 ? bench::split(p[1], '+') : std::vector<std::string>{};
      if (sc.size() != 2) return 2;
      const int64_t b = std::atoll(p[0].c_str()), s = std::atoll(sc[0].c_str()), cached = std::atoll(sc[1].c_str());
      run_case({hq, hkv, d, b, s, s + cached, true, {}, {}}, systems, min_ms, pattern, stream);
    }
    for (const auto& [spec, rows] : mixes) {
      Case c{hq, hkv, d, 0, 0, 0, false, spec, rows};
      c.batch = int64_t(c.mix_rows.size());
      c.qo_len = c.kv_len = *std::max_element(c.mix_rows.begin(), c.mix_rows.end());
      for (bool causal : {false, true})
        if (causal_arg == "both" || causal_arg == (causal ? "yes" : "no")) {
          c.causal = causal;
          run_case(c, systems, min_ms, pattern, stream);
        }
    }
  }
  BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}
