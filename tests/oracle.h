#pragma once
// Float64 reference attention, written plainly from DESIGN.md's "Semantics" section.
// It shares no code with src/: tensors are read through the public Tensor API only (a host
// copy, then load_as_double over the strides), and every rule (page addressing, masks,
// causal alignment, window, soft cap, LSE, GQA) is re-derived here.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "flashpage/dtype.h"
#include "flashpage/ops.h"
#include "flashpage/tensor.h"

namespace oracle {

using flashpage::AttentionParams;
using flashpage::Device;
using flashpage::KvLayout;
using flashpage::Shape;
using flashpage::Tensor;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A dense row-major float64 copy of a tensor.
struct Dense {
  Shape shape;
  std::vector<double> v;

  int64_t numel() const { return int64_t(v.size()); }
  int64_t offset(std::initializer_list<int64_t> idx) const {
    int64_t off = 0, d = 0;
    for (int64_t i : idx) off = off * shape[size_t(d++)] + i;
    return off;
  }
  double at(std::initializer_list<int64_t> idx) const { return v[size_t(offset(idx))]; }
  double& at(std::initializer_list<int64_t> idx) { return v[size_t(offset(idx))]; }
};

inline Dense zeros(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return Dense{shape, std::vector<double>(size_t(n), 0.0)};
}

// Reads any tensor (any device, any strides) into a Dense by walking its strides on the host.
inline Dense dense(const Tensor& t) {
  // A CUDA tensor is copied as a whole; the strides stay those of t (to(Device) of a
  // contiguous tensor is a byte copy, and tests only hand contiguous CUDA tensors here).
  const Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  Dense d = zeros(h.shape());
  const int64_t rank = h.dim();
  for (int64_t i = 0; i < d.numel(); ++i) {
    int64_t rem = i, off = 0;
    for (int64_t k = rank - 1; k >= 0; --k) {
      const int64_t s = h.shape()[size_t(k)];
      off += (rem % s) * h.strides()[size_t(k)];
      rem /= s;
    }
    d.v[size_t(i)] = flashpage::load_as_double(h.data(), h.dtype(), off);
  }
  return d;
}

inline std::vector<int64_t> ints(const Tensor& t) {
  const Dense d = dense(t);
  return std::vector<int64_t>(d.v.begin(), d.v.end());
}

// Output and LSE of one attention call.
struct Result {
  Dense out;
  Dense lse;
};

enum class Causal { none, top_left, bottom_right };

// One query token against L keys. key(j)/value(j) return D doubles; bias(j) is added to the
// soft-capped scaled logit (0 keeps, -inf drops). pos is the query's absolute position p
// (window: keys j >= p - window_left; causal: keys j <= p).
inline void attend(const double* q, int64_t d, int64_t len,
                   const std::function<const double*(int64_t)>& key,
                   const std::function<const double*(int64_t)>& value,
                   const std::function<double(int64_t)>& bias, int64_t pos, bool causal,
                   const AttentionParams& p, double* out, double* lse) {
  const double scale = p.scale > 0 ? double(p.scale) : 1.0 / std::sqrt(double(d));
  std::vector<double> s(size_t(len), kNegInf);
  double m = kNegInf;
  for (int64_t j = 0; j < len; ++j) {
    if (causal && j > pos) continue;
    if (p.window_left >= 0 && j < pos - p.window_left) continue;
    const double* k = key(j);
    double dot = 0;
    for (int64_t x = 0; x < d; ++x) dot += q[x] * k[x];
    double logit = dot * scale;
    if (p.logits_soft_cap > 0) logit = p.logits_soft_cap * std::tanh(logit / p.logits_soft_cap);
    logit += bias(j);
    s[size_t(j)] = logit;
    m = std::max(m, logit);
  }
  for (int64_t x = 0; x < d; ++x) out[x] = 0;
  if (m == kNegInf) {  // sees no key: zeros and -inf (DESIGN.md)
    *lse = kNegInf;
    return;
  }
  double sum = 0;
  for (int64_t j = 0; j < len; ++j) {
    if (s[size_t(j)] == kNegInf) continue;
    const double w = std::exp(s[size_t(j)] - m);
    sum += w;
    const double* v = value(j);
    for (int64_t x = 0; x < d; ++x) out[x] += w * v[x];
  }
  for (int64_t x = 0; x < d; ++x) out[x] /= sum;
  *lse = m + std::log(sum);
}

// Bias of a mask element: bool keeps `true`, float is additive.
inline double mask_bias(const Tensor& mask, double value) {
  if (mask.dtype() == flashpage::DType::boolean) return value != 0 ? 0.0 : kNegInf;
  return value;
}

// ---- sdpa: q [B,Hq,S,D], k/v [B,Hkv,L,D]; PyTorch masks (broadcast, right-aligned) ----
inline Result sdpa(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t, const Tensor& mask_t,
                   const AttentionParams& p) {
  const Dense q = dense(q_t), k = dense(k_t), v = dense(v_t);
  const int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], L = k.shape[2];
  const int64_t group = Hq / Hkv;
  Dense mask;
  std::vector<int64_t> mshape(4, 1);  // the mask's shape right-aligned to [B,H,S,L]
  if (mask_t.defined()) {
    mask = dense(mask_t);
    for (size_t i = 0; i < mask.shape.size(); ++i)
      mshape[4 - mask.shape.size() + i] = mask.shape[i];
  }
  Result r{zeros({B, Hq, S, D}), zeros({B, Hq, S})};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t hk = h / group;
        auto key = [&](int64_t j) { return &k.v[size_t(k.offset({b, hk, j, 0}))]; };
        auto value = [&](int64_t j) { return &v.v[size_t(v.offset({b, hk, j, 0}))]; };
        auto bias = [&](int64_t j) {
          if (!mask_t.defined()) return 0.0;
          const int64_t idx[4] = {b, h, i, j};
          int64_t off = 0;
          for (int a = 0; a < 4; ++a) off = off * mshape[a] + (mshape[a] == 1 ? 0 : idx[a]);
          return mask_bias(mask_t, mask.v[size_t(off)]);
        };
        attend(&q.v[size_t(q.offset({b, h, i, 0}))], D, L, key, value, bias, i,
               p.causal && !mask_t.defined(), p, &r.out.at({b, h, i, 0}), &r.lse.at({b, h, i}));
      }
  return r;
}

// ---- paged rows: the K/V tokens of each row read through the CSR table ----
struct Rows {
  int64_t hkv = 0, d = 0;
  std::vector<int64_t> len;
  std::vector<std::vector<double>> k, v;  // row b: [len][Hkv][D]
  const double* key(int64_t b, int64_t j, int64_t h) const {
    return &k[size_t(b)][size_t((j * hkv + h) * d)];
  }
  const double* value(int64_t b, int64_t j, int64_t h) const {
    return &v[size_t(b)][size_t((j * hkv + h) * d)];
  }
};

// Token t of row b lives in page indices[indptr[b] + t / P] at slot t % P.
inline Rows paged_rows(const flashpage::PagedKv& kv) {
  const Dense kp = dense(kv.k_pages), vp = dense(kv.v_pages);
  const auto indptr = ints(kv.table.indptr), indices = ints(kv.table.indices),
             last = ints(kv.table.last_page_len);
  const bool nhd = kv.layout == KvLayout::NHD;
  const int64_t P = kp.shape[nhd ? 1 : 2], Hkv = kp.shape[nhd ? 2 : 1], D = kp.shape[3];
  const int64_t B = int64_t(indptr.size()) - 1;
  Rows rows;
  rows.hkv = Hkv;
  rows.d = D;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pages = indptr[size_t(b) + 1] - indptr[size_t(b)];
    const int64_t len = pages == 0 ? 0 : P * (pages - 1) + last[size_t(b)];
    rows.len.push_back(len);
    std::vector<double> k(size_t(len * Hkv * D)), v(k.size());
    for (int64_t t = 0; t < len; ++t) {
      const int64_t page = indices[size_t(indptr[size_t(b)] + t / P)], slot = t % P;
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t x = 0; x < D; ++x) {
          const int64_t src = nhd ? kp.offset({page, slot, h, x}) : kp.offset({page, h, slot, x});
          k[size_t((t * Hkv + h) * D + x)] = kp.v[size_t(src)];
          v[size_t((t * Hkv + h) * D + x)] = vp.v[size_t(src)];
        }
    }
    rows.k.push_back(std::move(k));
    rows.v.push_back(std::move(v));
  }
  return rows;
}

// ---- rows of queries against rows of keys: the common core of decode/prefill/ragged ----
// q_at(b, i, h) gives query i of row b, head h; out_at/lse_at give where its results go.
// Bottom-right alignment: p = i + L - S. mask_bias(b, h, i, j) or null.
inline void rows_attention(const Rows& rows, const std::vector<int64_t>& q_len, int64_t Hq,
                           const std::function<const double*(int64_t, int64_t, int64_t)>& q_at,
                           const std::function<double*(int64_t, int64_t, int64_t)>& out_at,
                           const std::function<double*(int64_t, int64_t, int64_t)>& lse_at,
                           const std::function<double(int64_t, int64_t, int64_t, int64_t)>& mask,
                           const AttentionParams& p) {
  const int64_t group = Hq / rows.hkv;
  for (size_t b = 0; b < q_len.size(); ++b) {
    const int64_t S = q_len[b], L = rows.len[b];
    for (int64_t i = 0; i < S; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t hk = h / group, bb = int64_t(b);
        auto key = [&](int64_t j) { return rows.key(bb, j, hk); };
        auto value = [&](int64_t j) { return rows.value(bb, j, hk); };
        auto bias = [&](int64_t j) { return mask ? mask(bb, h, i, j) : 0.0; };
        attend(q_at(bb, i, h), rows.d, L, key, value, bias, i + L - S, p.causal && !mask, p,
               out_at(bb, i, h), lse_at(bb, i, h));
      }
  }
}

// Token-major ragged queries q [N,Hq,D] whose row b holds tokens qo[b] .. qo[b+1] - 1, no
// mask: the paged and the ragged prefill oracles share it.
inline Result ragged_rows_attention(const Rows& rows, const Dense& q,
                                    const std::vector<int64_t>& qo, const AttentionParams& p) {
  const int64_t N = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  Result r{zeros({N, Hq, D}), zeros({N, Hq})};
  std::vector<int64_t> q_len;
  for (size_t b = 0; b + 1 < qo.size(); ++b) q_len.push_back(qo[b + 1] - qo[b]);
  auto tok = [&](int64_t b, int64_t i) { return qo[size_t(b)] + i; };
  rows_attention(
      rows, q_len, Hq,
      [&](int64_t b, int64_t i, int64_t h) { return &q.v[size_t((tok(b, i) * Hq + h) * D)]; },
      [&](int64_t b, int64_t i, int64_t h) { return &r.out.v[size_t((tok(b, i) * Hq + h) * D)]; },
      [&](int64_t b, int64_t i, int64_t h) { return &r.lse.v[size_t(tok(b, i) * Hq + h)]; },
      nullptr, p);
  return r;
}

// Decode: q [B,Hq,D] (or [B,Hq,1,D]); out like q, lse [B,Hq].
inline Result decode(const Tensor& q_t, const flashpage::PagedKv& kv, const AttentionParams& p) {
  const Rows rows = paged_rows(kv);
  Dense q = dense(q_t);
  const int64_t B = q.shape[0], Hq = q.shape[1], D = q.shape.back();
  Result r{zeros(q.shape), zeros({B, Hq})};
  rows_attention(
      rows, std::vector<int64_t>(size_t(B), 1), Hq,
      [&](int64_t b, int64_t, int64_t h) { return &q.v[size_t((b * Hq + h) * D)]; },
      [&](int64_t b, int64_t, int64_t h) { return &r.out.v[size_t((b * Hq + h) * D)]; },
      [&](int64_t b, int64_t, int64_t h) { return &r.lse.v[size_t(b * Hq + h)]; }, nullptr, p);
  return r;
}

// Paged prefill. Uniform q [B,Hq,S,D] (qo_indptr undefined) with an optional mask [S,L],
// [B,S,L] or [B,1|Hq,S,L] (L = longest row, row b uses its first len(b) columns; a mask
// replaces causal), or ragged q [N,Hq,D] with qo_indptr [B+1].
inline Result prefill_paged(const Tensor& q_t, const Tensor& qo_indptr_t,
                            const flashpage::PagedKv& kv, const Tensor& mask_t,
                            const AttentionParams& p) {
  const Rows rows = paged_rows(kv);
  const Dense q = dense(q_t);
  const int64_t B = int64_t(rows.len.size());
  if (qo_indptr_t.defined()) return ragged_rows_attention(rows, q, ints(qo_indptr_t), p);
  const int64_t Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  Result r{zeros({B, Hq, S, D}), zeros({B, Hq, S})};
  Dense mask;
  std::function<double(int64_t, int64_t, int64_t, int64_t)> mask_fn;
  if (mask_t.defined()) {
    mask = dense(mask_t);
    const int64_t rank = int64_t(mask.shape.size()), Lm = mask.shape.back();
    mask_fn = [&, rank, Lm](int64_t b, int64_t h, int64_t i, int64_t j) {
      int64_t off = 0;
      if (rank == 2) off = i * Lm + j;
      if (rank == 3) off = (b * S + i) * Lm + j;
      if (rank == 4) off = ((b * mask.shape[1] + (mask.shape[1] == 1 ? 0 : h)) * S + i) * Lm + j;
      return mask_bias(mask_t, mask.v[size_t(off)]);
    };
  }
  rows_attention(
      rows, std::vector<int64_t>(size_t(B), S), Hq,
      [&](int64_t b, int64_t i, int64_t h) { return &q.v[size_t(q.offset({b, h, i, 0}))]; },
      [&](int64_t b, int64_t i, int64_t h) { return &r.out.v[size_t(r.out.offset({b, h, i, 0}))]; },
      [&](int64_t b, int64_t i, int64_t h) { return &r.lse.v[size_t(r.lse.offset({b, h, i}))]; },
      mask_fn, p);
  return r;
}

// Ragged prefill: q [Nq,Hq,D], k/v [Nkv,Hkv,D]; kv_indptr undefined = qo_indptr.
inline Result prefill_ragged(const Tensor& q_t, const Tensor& k_t, const Tensor& v_t,
                             const Tensor& qo_indptr_t, const Tensor& kv_indptr_t,
                             const AttentionParams& p) {
  const Dense q = dense(q_t), k = dense(k_t), v = dense(v_t);
  const auto qo = ints(qo_indptr_t);
  const auto kvp = kv_indptr_t.defined() ? ints(kv_indptr_t) : qo;
  const int64_t B = int64_t(qo.size()) - 1, D = q.shape[2], Hkv = k.shape[1];
  Rows rows;
  rows.hkv = Hkv;
  rows.d = D;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t begin = kvp[size_t(b)], len = kvp[size_t(b) + 1] - begin;
    rows.len.push_back(len);
    rows.k.emplace_back(k.v.begin() + begin * Hkv * D, k.v.begin() + (begin + len) * Hkv * D);
    rows.v.emplace_back(v.v.begin() + begin * Hkv * D, v.v.begin() + (begin + len) * Hkv * D);
  }
  return ragged_rows_attention(rows, q, qo, p);
}

// Merge of two partial results over disjoint keys: weights exp(lse_x - lse), lse = log-sum-exp.
inline Result merge(const Tensor& va_t, const Tensor& la_t, const Tensor& vb_t, const Tensor& lb_t) {
  const Dense va = dense(va_t), la = dense(la_t), vb = dense(vb_t), lb = dense(lb_t);
  const int64_t N = va.shape[0], H = va.shape[1], D = va.shape[2];
  Result r{zeros({N, H, D}), zeros({N, H})};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const double a = la.at({n, h}), b = lb.at({n, h}), m = std::max(a, b);
      if (m == kNegInf) {  // neither side saw a key
        r.lse.at({n, h}) = kNegInf;
        continue;
      }
      const double lse = m + std::log(std::exp(a - m) + std::exp(b - m));
      const double wa = std::exp(a - lse), wb = std::exp(b - lse);
      r.lse.at({n, h}) = lse;
      for (int64_t x = 0; x < D; ++x)
        r.out.at({n, h, x}) = wa * va.at({n, h, x}) + wb * vb.at({n, h, x});
    }
  return r;
}

}  // namespace oracle
