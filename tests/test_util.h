#pragma once
// Shared test helpers: seeds, random tensors, poisoned outputs, the error metric and paged
// KV fixtures with shuffled, non-contiguous pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "flashpage/flashpage.h"
#include "oracle.h"

namespace fpt {

using namespace flashpage;

#define FP_REQUIRE_CUDA()                                                   \
  do {                                                                      \
    if (!::flashpage::cuda_available()) GTEST_SKIP() << "no CUDA device";   \
  } while (0)

// Bigger sweeps on request: FLASHPAGE_TEST_SCALE=4 runs four times the random cases.
inline int test_scale() {
  const char* s = std::getenv("FLASHPAGE_TEST_SCALE");
  const int v = s ? std::atoi(s) : 1;
  return v > 0 ? v : 1;
}

// Fresh per run; FLASHPAGE_TEST_SEED reproduces a printed one.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("FLASHPAGE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

struct Rng {
  explicit Rng(uint64_t seed) : gen(seed) {}
  std::mt19937_64 gen;
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int64_t integer(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  }
  bool coin(double p_true) { return uniform(0, 1) < p_true; }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[size_t(integer(0, int64_t(v.size()) - 1))]; }
};

// Declares `rng` with a fresh seed that every failure in the scope prints.
#define FP_SEEDED_RNG(rng)                                                          \
  const uint64_t rng##_seed = ::fpt::fresh_seed();                                  \
  SCOPED_TRACE("seed " + std::to_string(rng##_seed) + " (replay: FLASHPAGE_TEST_SEED=" + \
               std::to_string(rng##_seed) + ")");                                        \
  ::fpt::Rng rng(rng##_seed)

// Runs one case of a table: an exception fails that case, with its message, and the
// remaining cases still run.
#define FP_CASE(...) EXPECT_NO_THROW(__VA_ARGS__)

inline Device cuda0() { return Device::cuda(0); }

// Uniform in [lo, hi) (never an all-zero input), stored as `dtype` on `device`.
inline Tensor random_tensor(Rng& rng, const Shape& shape, DType dtype, Device device,
                            double lo = -1.0, double hi = 1.0) {
  Tensor h = Tensor::empty(shape, DType::f32);
  float* p = h.data_as<float>();
  for (int64_t i = 0; i < h.numel(); ++i) p[i] = float(rng.uniform(lo, hi));
  return h.to(dtype).to(device);
}

inline Tensor host_ints(const std::vector<int64_t>& v, DType dtype = DType::i32) {
  Tensor t = Tensor::empty({int64_t(v.size())}, dtype);
  for (size_t i = 0; i < v.size(); ++i) store_from_double(t.data(), dtype, int64_t(i), double(v[i]));
  return t;
}

inline Tensor poisoned(const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  t.fill_(std::nan(""));
  return t;
}

inline double budget(DType t) {
  switch (t) {
    case DType::f32: return 1e-5;
    case DType::f16: return 2e-3;
    default: return 1e-2;
  }
}
// LSE is f32 whatever the inputs; the logits of f16/bf16 kernels may see one more rounding.
inline double lse_tolerance(DType t) { return t == DType::f32 ? 1e-4 : 2e-2; }

// ||out - ref|| / ||ref||; NaN when out holds a NaN (an unwritten, poisoned element).
inline double rel_error(const Tensor& out, const oracle::Dense& ref) {
  const oracle::Dense o = oracle::dense(out);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.v.size(); ++i) {
    if (std::isnan(o.v[i]) || std::isinf(o.v[i])) return std::nan("");
    num += (o.v[i] - ref.v[i]) * (o.v[i] - ref.v[i]);
    den += ref.v[i] * ref.v[i];
  }
  if (den == 0) return std::sqrt(num);  // all-zero reference (no row sees a key): absolute
  return std::sqrt(num / den);
}

inline int64_t count_nan(const Tensor& t) {
  const oracle::Dense d = oracle::dense(t);
  return std::count_if(d.v.begin(), d.v.end(), [](double x) { return std::isnan(x); });
}

inline void expect_output(const Tensor& out, const oracle::Dense& ref, DType dtype,
                          const std::string& what = "out") {
  ASSERT_EQ(out.shape(), ref.shape) << what;
  EXPECT_EQ(count_nan(out), 0) << what << ": unwritten (poisoned) or NaN elements";
  const double err = rel_error(out, ref);
  EXPECT_LT(err, budget(dtype)) << what << ": ||out-ref||/||ref|| over budget for "
                                << dtype_name(dtype);
}

// Rows [from, end) of dim 0 still hold the poison (NaN) they were given: never written.
inline void expect_unwritten_rows(const Tensor& t, int64_t from, const std::string& what) {
  const Tensor rows = t.slice(0, from, t.size(0));
  EXPECT_EQ(count_nan(rows), rows.numel()) << what << ": rows from " << from << " were written";
}

// -inf rows must be exactly -inf; others within tolerance (relative to max(1, |ref|)).
inline void expect_lse(const Tensor& lse, const oracle::Dense& ref, DType dtype) {
  ASSERT_EQ(lse.shape(), ref.shape) << "lse";
  ASSERT_EQ(lse.dtype(), DType::f32) << "lse";
  const oracle::Dense got = oracle::dense(lse);
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < ref.v.size(); ++i) {
    const double r = ref.v[i], g = got.v[i];
    bool ok;
    if (std::isinf(r))
      ok = std::isinf(g) && g < 0;
    else
      ok = std::isfinite(g) && std::fabs(g - r) <= lse_tolerance(dtype) * std::max(1.0, std::fabs(r));
    if (!ok && bad++ == 0)
      first = "lse[" + std::to_string(i) + "] = " + std::to_string(g) + ", ref " + std::to_string(r);
  }
  EXPECT_EQ(bad, 0) << bad << " wrong LSE elements; first: " << first;
}

// ---- paged KV with shuffled, non-contiguous pages -------------------------------------
struct PagedCase {
  PagedKv kv;             // on the device
  PageTable host_table;   // the same table on the host
  std::vector<int64_t> lengths;
};

inline Shape page_shape(int64_t num_pages, int64_t page_size, int64_t hkv, int64_t d,
                        KvLayout layout) {
  return layout == KvLayout::NHD ? Shape{num_pages, page_size, hkv, d}
                                 : Shape{num_pages, hkv, page_size, d};
}

// The table for `lengths`: rows take pages from a random permutation of a pool larger than
// needed, so ids are shuffled and gaps are normal.
inline PageTable random_table(Rng& rng, const std::vector<int64_t>& lengths, int64_t page_size,
                              int64_t num_pages) {
  std::vector<int64_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  std::vector<int64_t> indptr{0}, indices, last;
  size_t next = 0;
  for (int64_t len : lengths) {
    const int64_t pages = (len + page_size - 1) / page_size;
    for (int64_t i = 0; i < pages; ++i) indices.push_back(perm[next++]);
    indptr.push_back(int64_t(indices.size()));
    last.push_back(len == 0 ? 0 : len - page_size * (pages - 1));
  }
  return PageTable{host_ints(indptr), host_ints(indices), host_ints(last)};
}

// Pages of random values where a row has a token and NaN everywhere else (a pool's slots
// past a row's end and its unused pages hold whatever was there before): a kernel that lets
// a slot it should not read reach its output shows up as NaN.
inline Tensor random_pages(Rng& rng, const Shape& shape, const PageTable& table, KvLayout layout,
                           DType dtype, Device device) {
  Tensor h = Tensor::empty(shape, DType::f32);
  float* p = h.data_as<float>();
  const int64_t page_size = layout == KvLayout::NHD ? shape[1] : shape[2];
  const int64_t hkv = layout == KvLayout::NHD ? shape[2] : shape[1], d = shape[3];
  std::vector<char> used(size_t(shape[0] * page_size), 0);  // (page, slot) holds a token
  const int32_t* indptr = table.indptr.data_as<int32_t>();
  const int32_t* indices = table.indices.data_as<int32_t>();
  const int32_t* last = table.last_page_len.data_as<int32_t>();
  const int64_t rows = table.indptr.size(0) - 1;
  for (int64_t r = 0; r < rows; ++r)
    for (int32_t i = indptr[r]; i < indptr[r + 1]; ++i) {
      const int64_t slots = i + 1 == indptr[r + 1] ? last[r] : page_size;
      for (int64_t t = 0; t < slots; ++t) used[size_t(indices[i] * page_size + t)] = 1;
    }
  for (int64_t pg = 0; pg < shape[0]; ++pg)
    for (int64_t t = 0; t < page_size; ++t)
      for (int64_t hd = 0; hd < hkv; ++hd) {
        const int64_t row = layout == KvLayout::NHD ? (pg * page_size + t) * hkv + hd
                                                    : (pg * hkv + hd) * page_size + t;
        const bool live = used[size_t(pg * page_size + t)] != 0;
        for (int64_t e = 0; e < d; ++e)
          p[row * d + e] = live ? float(rng.uniform(-1.0, 1.0)) : std::nanf("");
      }
  return h.to(dtype).to(device);
}

inline int64_t pages_needed(const std::vector<int64_t>& lengths, int64_t page_size) {
  int64_t n = 0;
  for (int64_t len : lengths) n += (len + page_size - 1) / page_size;
  return n;
}

inline PagedCase random_paged(Rng& rng, const std::vector<int64_t>& lengths, int64_t page_size,
                              int64_t hkv, int64_t d, KvLayout layout, DType dtype,
                              Device device) {
  const int64_t num_pages = pages_needed(lengths, page_size) + rng.integer(1, 5);
  PagedCase c;
  c.lengths = lengths;
  c.host_table = random_table(rng, lengths, page_size, num_pages);
  const Shape shape = page_shape(num_pages, page_size, hkv, d, layout);
  c.kv.k_pages = random_pages(rng, shape, c.host_table, layout, dtype, device);
  c.kv.v_pages = random_pages(rng, shape, c.host_table, layout, dtype, device);
  c.kv.layout = layout;
  c.kv.table = c.host_table.to(device);
  return c;
}

inline std::string str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str() + "]";
}

// Lengths that matter for paging: 0, 1, P, P+1, awkward and long ones.
inline std::vector<int64_t> interesting_lengths(Rng& rng, int64_t page_size, int64_t batch,
                                                int64_t longest = 200) {
  const std::vector<int64_t> special{0, 1, page_size, page_size + 1, 113, 2 * page_size - 1};
  std::vector<int64_t> out;
  for (int64_t b = 0; b < batch; ++b)
    out.push_back(rng.coin(0.5) ? std::min(rng.pick(special), longest) : rng.integer(1, longest));
  return out;
}

}  // namespace fpt
