// flashpage check: randomised cases of every attention op against the float64 oracle
// (tests/oracle.h, which shares no code with src/), on fresh inputs with poisoned outputs.
// Prints one line per failing case and "N passed, M failed" last.
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>

#include "cli_args.h"
#include "commands.h"
#include "flashpage/flashpage.h"
#include "oracle.h"
#include "random_tensors.h"

namespace flashpage::cli {

namespace {

struct Case {
  std::string name;
  double error = 0;  // ||out - ref|| / ||ref||, or inf when something was not written
  double budget = 0;
};

double budget_for(DType t) { return t == DType::f32 ? 1e-5 : t == DType::f16 ? 2e-3 : 1e-2; }

double rel_error(const Tensor& out, const oracle::Dense& ref) {
  const oracle::Dense got = oracle::dense(out.contiguous());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.v.size(); ++i) {
    if (!std::isfinite(got.v[i])) return INFINITY;  // poison left: an element was not written
    num += (got.v[i] - ref.v[i]) * (got.v[i] - ref.v[i]);
    den += ref.v[i] * ref.v[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// A random paged cache: rows of the given lengths on shuffled pages of a larger pool.
PagedKv random_cache(const std::vector<int64_t>& lengths, int64_t hkv, int64_t d, int64_t page,
                     KvLayout layout, DType dtype, Device dev, std::mt19937_64& rng,
                     PageTable& host) {
  const int64_t batch = int64_t(lengths.size());
  std::vector<int32_t> indptr{0};
  for (int64_t len : lengths) indptr.push_back(int32_t(indptr.back() + (len + page - 1) / page));
  const int64_t used = indptr.back(), num_pages = used + 3;
  std::vector<int32_t> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  host.indptr = Tensor::empty({batch + 1}, DType::i32);
  host.indices = Tensor::empty({std::max<int64_t>(used, 1)}, DType::i32);
  host.last_page_len = Tensor::empty({batch}, DType::i32);
  std::copy(indptr.begin(), indptr.end(), host.indptr.data_as<int32_t>());
  std::copy_n(ids.begin(), std::max<int64_t>(used, 1), host.indices.data_as<int32_t>());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = indptr[size_t(b) + 1] - indptr[size_t(b)];
    host.last_page_len.data_as<int32_t>()[b] =
        int32_t(pages == 0 ? 0 : lengths[size_t(b)] - (pages - 1) * page);
  }
  const Shape shape = layout == KvLayout::NHD ? Shape{num_pages, page, hkv, d}
                                              : Shape{num_pages, hkv, page, d};
  PagedKv kv;
  kv.layout = layout;
  kv.k_pages = random_normal(shape, dtype, dev, rng);
  kv.v_pages = random_normal(shape, dtype, dev, rng);
  kv.table = host.to(dev);
  return kv;
}

Tensor poisoned(const Shape& shape, DType dtype, Device dev) {
  Tensor t = Tensor::empty(shape, dtype, dev);
  t.fill_(NAN);
  return t;
}

}  // namespace

int run_check(const std::vector<std::string>& argv) {
  Args args(argv, {"cases", "seed", "device"});
  const int64_t cases = args.integer("cases", 40, 1);
  const uint64_t seed = args.has("seed") ? uint64_t(args.integer("seed", 0, 0))
                                         : uint64_t(std::random_device{}());
  const Device dev = args.has("device") ? parse_device(args.str("device", "")) : default_device();
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<int64_t> xs) {
    return *(xs.begin() + std::uniform_int_distribution<size_t>(0, xs.size() - 1)(rng));
  };
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::printf("flashpage check on %s, seed %llu, %lld cases\n", device_description(dev).c_str(),
              (unsigned long long)seed, (long long)cases);
  int64_t passed = 0, failed = 0;
  for (int64_t c = 0; c < cases; ++c) {
    const DType dtype = dev.is_cuda() ? (pick({0, 1}) ? DType::bf16 : DType::f16)
                                      : (pick({0, 1, 2}) == 0 ? DType::f32
                                                              : pick({0, 1}) ? DType::bf16 : DType::f16);
    const int64_t hkv = pick({1, 2, 4}), group = pick({1, 2, 4, 8}), hq = hkv * group;
    const int64_t d = dev.is_cuda() ? pick({64, 128, 256}) : pick({8, 40, 64, 128});
    const int64_t page = pick({1, 3, 16, 64});
    const KvLayout layout = pick({0, 1}) ? KvLayout::NHD : KvLayout::HND;
    const int64_t batch = uniform(1, 4);
    AttentionParams p;
    p.window_left = pick({0, 1, 2, 3}) == 0 ? int(uniform(0, 64)) : -1;
    p.logits_soft_cap = pick({0, 1, 2, 3}) == 0 ? 30.0f : 0.0f;
    std::vector<int64_t> lengths(static_cast<size_t>(batch));
    for (auto& len : lengths) len = pick({0, 1, 2, 3}) == 0 ? uniform(0, 2) : uniform(1, 300);
    const int op = int(c % 4);
    Case k;
    k.budget = budget_for(dtype);
    char desc[200];
    std::snprintf(desc, sizeof desc, "%s B=%lld Hq=%lld Hkv=%lld D=%lld page=%lld %s window=%d cap=%g",
                  std::string(dtype_name(dtype)).c_str(), (long long)batch, (long long)hq,
                  (long long)hkv, (long long)d, (long long)page,
                  std::string(layout_name(layout)).c_str(), p.window_left, p.logits_soft_cap);
    try {
      if (op == 0) {  // decode through plan/run
        PageTable host;
        PagedKv kv = random_cache(lengths, hkv, d, page, layout, dtype, dev, rng, host);
        Tensor q = random_normal({batch, hq, d}, dtype, dev, rng);
        Tensor out = poisoned({batch, hq, d}, dtype, dev);
        Workspace ws(dev, size_t(16) << 20);
        const Plan plan = plan_decode(ws, host, kv, hq);
        batch_decode(ws, plan, q, kv, p, out);
        k.name = std::string("decode ") + desc;
        k.error = rel_error(out, oracle::decode(q, kv, p).out);
      } else if (op == 1) {  // paged prefill, ragged queries, causal bottom-right
        p.causal = true;
        PageTable host;
        PagedKv kv = random_cache(lengths, hkv, d, page, layout, dtype, dev, rng, host);
        Tensor qo = Tensor::empty({batch + 1}, DType::i32);
        qo.data_as<int32_t>()[0] = 0;
        for (int64_t b = 0; b < batch; ++b)
          qo.data_as<int32_t>()[b + 1] =
              qo.data_as<int32_t>()[b] + int32_t(std::min<int64_t>(lengths[size_t(b)], uniform(0, 40)));
        const int64_t n = qo.data_as<int32_t>()[batch];
        Tensor q = random_normal({n, hq, d}, dtype, dev, rng);
        Tensor out = poisoned({n, hq, d}, dtype, dev);
        Workspace ws(dev, size_t(16) << 20);
        const Plan plan = plan_prefill(ws, qo, host, kv, 0, hq);
        batch_prefill_paged(ws, plan, q, qo.to(dev), kv, {}, p, out);
        k.name = std::string("prefill_paged ") + desc;
        k.error = rel_error(out, oracle::prefill_paged(q, qo, kv, {}, p).out);
      } else if (op == 2) {  // ragged self-attention over segments
        p.causal = pick({0, 1});
        Tensor indptr = Tensor::empty({batch + 1}, DType::i32);
        indptr.data_as<int32_t>()[0] = 0;
        for (int64_t b = 0; b < batch; ++b)
          indptr.data_as<int32_t>()[b + 1] = indptr.data_as<int32_t>()[b] + int32_t(lengths[size_t(b)] % 97);
        const int64_t n = indptr.data_as<int32_t>()[batch];
        Tensor q = random_normal({n, hq, d}, dtype, dev, rng);
        Tensor kk = random_normal({n, hkv, d}, dtype, dev, rng);
        Tensor v = random_normal({n, hkv, d}, dtype, dev, rng);
        Tensor out = poisoned({n, hq, d}, dtype, dev);
        batch_prefill_ragged(q, kk, v, indptr.to(dev), {}, p, out);
        k.name = std::string("prefill_ragged ") + desc;
        k.error = rel_error(out, oracle::prefill_ragged(q, kk, v, indptr, {}, p).out);
      } else {  // sdpa with PyTorch semantics: top-left causal or a broadcast bool mask
        const int64_t s = uniform(1, 48), l = uniform(1, 96);
        Tensor q = random_normal({batch, hq, s, d}, dtype, dev, rng);
        Tensor kk = random_normal({batch, hkv, l, d}, dtype, dev, rng);
        Tensor v = random_normal({batch, hkv, l, d}, dtype, dev, rng);
        Tensor mask;
        if (pick({0, 1})) {
          p.causal = true;
        } else {
          Tensor m = Tensor::empty({1, 1, s, l}, DType::boolean);
          for (int64_t i = 0; i < s * l; ++i) m.data_as<uint8_t>()[i] = uniform(0, 3) != 0;
          mask = m.to(dev);
        }
        Tensor out = poisoned({batch, hq, s, d}, dtype, dev);
        sdpa(q, kk, v, mask, p, out);
        k.name = std::string("sdpa ") + desc;
        k.error = rel_error(out, oracle::sdpa(q, kk, v, mask, p).out);
      }
    } catch (const Error& e) {
      k.name += std::string(" threw: ") + e.what();
      k.error = INFINITY;
    }
    if (k.error < k.budget) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAIL case %lld: %s: rel error %.3g (budget %.0e)\n", (long long)c,
                  k.name.c_str(), k.error, k.budget);
    }
  }
  std::printf("%lld passed, %lld failed\n", (long long)passed, (long long)failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace flashpage::cli
