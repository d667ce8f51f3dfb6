// Bad inputs: every validation path throws flashpage::Error whose message names the argument
// (and, where simple, the value given). Table-driven: each case breaks one thing of a valid
// call. The ASan build also checks that none of them reads out of bounds.
#include <algorithm>
#include <cctype>
#include <functional>

#include "test_util.h"

namespace fpt {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Each group is satisfied when the message contains any one of its alternatives
// (case-insensitive): argument names differ between "q" and "query" spellings.
using Group = std::vector<std::string>;

struct ErrorCase {
  std::string name;
  std::function<void()> call;
  std::vector<Group> must_contain;
};

void expect_error(const ErrorCase& c) {
  SCOPED_TRACE(c.name);
  try {
    c.call();
    ADD_FAILURE() << c.name << ": expected flashpage::Error, nothing was thrown";
  } catch (const Error& e) {
    const std::string msg = lower(e.what());
    for (const Group& g : c.must_contain) {
      const bool found = std::any_of(g.begin(), g.end(), [&](const std::string& alt) {
        return msg.find(lower(alt)) != std::string::npos;
      });
      EXPECT_TRUE(found) << c.name << ": message \"" << e.what() << "\" names none of {"
                         << [&] {
                              std::string s;
                              for (const auto& a : g) s += (s.empty() ? "" : ", ") + a;
                              return s;
                            }()
                         << "}";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": expected flashpage::Error, got another exception: " << e.what();
  }
}

const Group kQ{"q:", "query", "q ", "'q'"};
const Group kK{"k:", "key", "k ", "'k'"};
const Group kV{"v:", "value", "v ", "'v'"};

// ---- sdpa ---------------------------------------------------------------------------------
struct SdpaArgs {
  Tensor q, k, v, mask, out, lse;
  AttentionParams p;
  void call() { sdpa(q, k, v, mask, p, out, lse); }
};

SdpaArgs valid_sdpa(Rng& rng, Device dev = Device::cpu()) {
  SdpaArgs a;
  a.q = random_tensor(rng, {2, 4, 3, 64}, DType::f32, dev);
  a.k = random_tensor(rng, {2, 2, 5, 64}, DType::f32, dev);
  a.v = random_tensor(rng, {2, 2, 5, 64}, DType::f32, dev);
  a.out = Tensor::empty({2, 4, 3, 64}, DType::f32, dev);
  a.lse = Tensor::empty({2, 4, 3}, DType::f32, dev);
  return a;
}

TEST(Errors, Sdpa) {
  FP_SEEDED_RNG(rng);
  const SdpaArgs base = valid_sdpa(rng);
  {
    SdpaArgs a = base;
    ASSERT_NO_THROW(a.call()) << "the baseline call must be valid";
  }
  auto with = [&](std::function<void(SdpaArgs&)> edit) {
    return [=] {
      SdpaArgs a = base;
      edit(a);
      a.call();
    };
  };
  const std::vector<ErrorCase> cases{
      {"q undefined", with([](SdpaArgs& a) { a.q = Tensor(); }), {kQ}},
      {"q rank 3", with([](SdpaArgs& a) { a.q = Tensor::empty({2, 4, 64}, DType::f32); }), {kQ, {"[2,4,64]"}}},
      {"k rank 5", with([](SdpaArgs& a) { a.k = Tensor::empty({2, 2, 5, 64, 1}, DType::f32); }), {kK}},
      {"v shape != k", with([](SdpaArgs& a) { a.v = Tensor::empty({2, 2, 6, 64}, DType::f32); }), {kV}},
      {"k dtype != q", with([](SdpaArgs& a) { a.k = a.k.to(DType::bf16); }), {kK}},
      {"v dtype != q", with([](SdpaArgs& a) { a.v = a.v.to(DType::f16); }), {kV}},
      {"q integer dtype", with([](SdpaArgs& a) {
         a.q = Tensor::zeros({2, 4, 3, 64}, DType::i32);
         a.k = Tensor::zeros({2, 2, 5, 64}, DType::i32);
         a.v = a.k;
         a.out = Tensor::zeros({2, 4, 3, 64}, DType::i32);
       }), {kQ}},
      {"out dtype != q", with([](SdpaArgs& a) { a.out = Tensor::empty({2, 4, 3, 64}, DType::bf16); }), {{"out"}}},
      {"out shape", with([](SdpaArgs& a) { a.out = Tensor::empty({2, 4, 4, 64}, DType::f32); }), {{"out"}}},
      {"lse not f32", with([](SdpaArgs& a) { a.lse = Tensor::empty({2, 4, 3}, DType::f16); }), {{"lse"}}},
      {"lse shape", with([](SdpaArgs& a) { a.lse = Tensor::empty({2, 4}, DType::f32); }), {{"lse"}}},
      {"Hq % Hkv", with([](SdpaArgs& a) {
         a.k = Tensor::empty({2, 3, 5, 64}, DType::f32);
         a.v = Tensor::empty({2, 3, 5, 64}, DType::f32);
       }), {{"hq", "heads", "num_qo_heads"}}},
      {"batch q != k", with([](SdpaArgs& a) {
         a.k = Tensor::empty({3, 2, 5, 64}, DType::f32);
         a.v = Tensor::empty({3, 2, 5, 64}, DType::f32);
       }), {{"k:", "key", "k ", "batch"}}},
      {"head_dim q != k", with([](SdpaArgs& a) {
         a.k = Tensor::empty({2, 2, 5, 32}, DType::f32);
         a.v = Tensor::empty({2, 2, 5, 32}, DType::f32);
       }), {{"k:", "key", "k ", "head_dim"}}},
      {"head_dim 12", with([](SdpaArgs& a) {
         a.q = Tensor::empty({2, 4, 3, 12}, DType::f32);
         a.k = Tensor::empty({2, 2, 5, 12}, DType::f32);
         a.v = a.k;
         a.out = Tensor::empty({2, 4, 3, 12}, DType::f32);
       }), {{"head_dim"}, {"12"}}},
      {"head_dim 264", with([](SdpaArgs& a) {
         a.q = Tensor::empty({2, 4, 3, 264}, DType::f32);
         a.k = Tensor::empty({2, 2, 5, 264}, DType::f32);
         a.v = a.k;
         a.out = Tensor::empty({2, 4, 3, 264}, DType::f32);
       }), {{"head_dim"}, {"264"}}},
      {"mask with causal", with([](SdpaArgs& a) {
         a.mask = Tensor::zeros({3, 5}, DType::boolean);
         a.p.causal = true;
       }), {{"mask"}, {"causal"}}},
      {"mask not broadcastable", with([](SdpaArgs& a) { a.mask = Tensor::zeros({3, 4}, DType::boolean); }), {{"mask"}}},
      {"mask batch 3", with([](SdpaArgs& a) { a.mask = Tensor::zeros({3, 1, 3, 5}, DType::f32); }), {{"mask"}}},
      {"mask rank 5", with([](SdpaArgs& a) { a.mask = Tensor::zeros({1, 2, 4, 3, 5}, DType::f32); }), {{"mask"}}},
      {"mask int dtype", with([](SdpaArgs& a) { a.mask = Tensor::zeros({3, 5}, DType::i32); }), {{"mask"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

// ---- paged: decode and prefill --------------------------------------------------------------
struct PagedArgs {
  PagedCase pc;
  Tensor q, out, lse;
  int64_t hq = 4;
};

PagedArgs valid_decode(Rng& rng) {
  PagedArgs a;
  a.pc = random_paged(rng, {5, 17}, 16, 2, 64, KvLayout::NHD, DType::f32, Device::cpu());
  a.q = random_tensor(rng, {2, 4, 64}, DType::f32, Device::cpu());
  a.out = Tensor::empty({2, 4, 64}, DType::f32);
  a.lse = Tensor::empty({2, 4}, DType::f32);
  return a;
}

// The page table's breakages, checked by every op that reads a table on the host.
std::vector<std::pair<std::string, std::function<void(PageTable&, int64_t num_pages)>>> table_breakages() {
  return {
      {"indptr decreasing", [](PageTable& t, int64_t) { t.indptr = host_ints({0, 2, 1}); }},
      {"indptr[0] != 0", [](PageTable& t, int64_t) { t.indptr = host_ints({1, 1, 3}); }},
      {"indptr int64", [](PageTable& t, int64_t) { t.indptr = host_ints({0, 1, 3}, DType::i64); }},
      {"indptr rank 2", [](PageTable& t, int64_t) { t.indptr = t.indptr.view({1, 3}); }},
      {"indices negative id", [](PageTable& t, int64_t) { t.indices.data_as<int32_t>()[1] = -1; }},
      {"indices id >= num_pages", [](PageTable& t, int64_t n) { t.indices.data_as<int32_t>()[2] = int32_t(n); }},
      {"indices shorter than indptr[B]", [](PageTable& t, int64_t) { t.indices = t.indices.slice(0, 0, 2); }},
      {"indices int64", [](PageTable& t, int64_t) { t.indices = t.indices.to(DType::i64); }},
      {"last_page_len 0 with pages", [](PageTable& t, int64_t) { t.last_page_len.data_as<int32_t>()[1] = 0; }},
      {"last_page_len > page_size", [](PageTable& t, int64_t) { t.last_page_len.data_as<int32_t>()[0] = 17; }},
      {"last_page_len size", [](PageTable& t, int64_t) { t.last_page_len = host_ints({5}); }},
      {"last_page_len f32", [](PageTable& t, int64_t) { t.last_page_len = t.last_page_len.to(DType::f32); }},
  };
}

Group table_group(const std::string& breakage) {
  if (breakage.rfind("indptr", 0) == 0) return {"indptr"};
  if (breakage.rfind("indices", 0) == 0) return {"indices"};
  return {"last_page_len"};
}

// A fresh copy of the table (tests edit it in place).
PageTable clone_table(const PageTable& t) {
  return {t.indptr.clone(), t.indices.clone(), t.last_page_len.clone()};
}

TEST(Errors, PageTables) {
  FP_SEEDED_RNG(rng);
  const PagedArgs base = valid_decode(rng);
  const int64_t num_pages = base.pc.kv.num_pages();
  ASSERT_EQ(base.pc.lengths, (std::vector<int64_t>{5, 17}));
  for (const auto& [name, brk] : table_breakages()) {
    auto broken = [&, brk = brk] {
      PagedArgs a = base;
      a.pc.host_table = clone_table(base.pc.host_table);
      brk(a.pc.host_table, num_pages);
      a.pc.kv.table = a.pc.host_table;
      return a;
    };
    const Group g = table_group(name);
    expect_error({"plan_decode: " + name, [&] {
                    PagedArgs a = broken();
                    Workspace ws(Device::cpu(), size_t(4) << 20);
                    plan_decode(ws, a.pc.host_table, a.pc.kv, a.hq);
                  }, {g}});
    expect_error({"batch_decode one-shot: " + name, [&] {
                    PagedArgs a = broken();
                    batch_decode(a.q, a.pc.kv, {});
                  }, {g}});
    expect_error({"plan_prefill: " + name, [&] {
                    PagedArgs a = broken();
                    Workspace ws(Device::cpu(), size_t(4) << 20);
                    plan_prefill(ws, Tensor(), a.pc.host_table, a.pc.kv, 3, a.hq);
                  }, {g}});
    expect_error({"batch_prefill_paged one-shot: " + name, [&] {
                    PagedArgs a = broken();
                    batch_prefill_paged(random_tensor(rng, {2, 4, 3, 64}, DType::f32, Device::cpu()),
                                        Tensor(), a.pc.kv);
                  }, {g}});
    // gather/append may notice the broken table through the sizes it implies first.
    Group g_gather = g, g_append = g;
    g_gather.push_back("k_out");
    g_append.insert(g_append.end(), {"positions", "batch_indices"});
    expect_error({"gather_paged_kv: " + name, [&] {
                    PagedArgs a = broken();
                    Tensor ko = Tensor::empty({22, 2, 64}, DType::f32), vo = ko.clone();
                    gather_paged_kv(a.pc.kv, ko, vo);
                  }, {g_gather}});
    expect_error({"append_paged_kv: " + name, [&] {
                    PagedArgs a = broken();
                    Tensor k = Tensor::zeros({2, 2, 64}, DType::f32);
                    append_paged_kv(k, k, host_ints({0, 1}), host_ints({0, 0}), a.pc.kv);
                  }, {g_append}});
  }
}

// Limits of the int32 work lists and the host helper row_lengths (which reads indptr and
// last_page_len like the planners do).
TEST(Errors, Limits) {
  // One row of 2^23 + 1 pages of 256 tokens: 2^31 + 1 tokens, past the int32 positions. The
  // lengths are checked before any page id is read, so one id is enough.
  PagedKv kv;
  kv.k_pages = Tensor::zeros({1, 256, 1, 8}, DType::f32);
  kv.v_pages = kv.k_pages;
  kv.table = {host_ints({0, (int64_t(1) << 23) + 1}), host_ints({0}), host_ints({1})};
  Workspace ws(Device::cpu(), size_t(1) << 20);
  PageTable small{host_ints({0, 1}), host_ints({0}), host_ints({3})};
  ASSERT_EQ(row_lengths(small, 4), (std::vector<int64_t>{3}));
  const std::vector<ErrorCase> cases{
      {"row past 2^31-1 tokens", [&] { plan_decode(ws, kv.table, kv, 1); },
       {{"page_table"}, {"2^31-1"}, {"2147483649"}}},
      {"qo_len past 2^31-1 rows", [&] {
         PagedKv one = kv;
         one.table = {host_ints({0, 1}), host_ints({0}), host_ints({5})};
         plan_prefill(ws, Tensor(), one.table, one, int64_t(1) << 31, 1);
       }, {{"qo_len"}, {"2147483648"}}},
      {"row_lengths page_size", [&] { row_lengths(small, -4); }, {{"page_size"}, {"-4"}}},
      {"row_lengths decreasing indptr", [] {
         row_lengths({host_ints({0, 3, 1}), host_ints({0}), host_ints({2, 1})}, 4);
       }, {{"page_table.indptr"}, {"non-decreasing"}}},
      {"row_lengths indptr[0]", [] { row_lengths({host_ints({3, 1}), host_ints({0}), host_ints({99})}, 4); },
       {{"page_table.indptr"}, {"indptr[0]"}}},
      {"row_lengths last_page_len", [] { row_lengths({host_ints({0, 1}), host_ints({0}), host_ints({5})}, 4); },
       {{"last_page_len"}, {"5"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

TEST(Errors, Decode) {
  FP_SEEDED_RNG(rng);
  const PagedArgs base = valid_decode(rng);
  Workspace ws(Device::cpu(), size_t(8) << 20);
  {
    PagedArgs a = base;
    const Plan plan = plan_decode(ws, a.pc.host_table, a.pc.kv, a.hq);
    ASSERT_NO_THROW(batch_decode(ws, plan, a.q, a.pc.kv, {}, a.out, a.lse));
  }
  auto with = [&](std::function<void(PagedArgs&)> edit) {
    return [=, &ws] {
      PagedArgs a = base;
      edit(a);
      const Plan plan = plan_decode(ws, a.pc.host_table, a.pc.kv, a.hq);
      batch_decode(ws, plan, a.q, a.pc.kv, {}, a.out, a.lse);
    };
  };
  auto bad_pages = [&](int64_t d) {
    return [=](PagedArgs& a) {
      a.pc.kv.k_pages = Tensor::zeros({4, 16, 2, d}, DType::f32);
      a.pc.kv.v_pages = a.pc.kv.k_pages;
      a.q = Tensor::zeros({2, 4, d}, DType::f32);
      a.out = Tensor::empty({2, 4, d}, DType::f32);
    };
  };
  const std::vector<ErrorCase> cases{
      {"q rank 2", with([](PagedArgs& a) { a.q = Tensor::empty({2, 256}, DType::f32); }), {kQ}},
      {"q batch != table", with([](PagedArgs& a) {
         a.q = Tensor::empty({3, 4, 64}, DType::f32);
         a.out = Tensor::empty({3, 4, 64}, DType::f32);
         a.lse = Tensor::empty({3, 4}, DType::f32);
       }), {{"q:", "query", "q ", "plan"}}},
      {"q dtype != pages", with([](PagedArgs& a) {
         a.q = a.q.to(DType::bf16);
         a.out = a.out.to(DType::bf16);
       }), {{"q:", "query", "q ", "k_pages", "pages"}}},
      {"v_pages dtype != k_pages", with([](PagedArgs& a) { a.pc.kv.v_pages = a.pc.kv.v_pages.to(DType::f16); }), {{"v_pages"}}},
      {"v_pages shape != k_pages", with([](PagedArgs& a) {
         a.pc.kv.v_pages = Tensor::zeros({a.pc.kv.num_pages(), 16, 2, 32}, DType::f32);
       }), {{"v_pages"}}},
      {"k_pages rank 3", with([](PagedArgs& a) {
         a.pc.kv.k_pages = Tensor::zeros({4, 16, 128}, DType::f32);
         a.pc.kv.v_pages = a.pc.kv.k_pages;
       }), {{"k_pages"}}},
      {"out dtype != q", with([](PagedArgs& a) { a.out = Tensor::empty({2, 4, 64}, DType::f16); }), {{"out"}}},
      {"out shape", with([](PagedArgs& a) { a.out = Tensor::empty({2, 4, 32}, DType::f32); }), {{"out"}}},
      {"lse not f32", with([](PagedArgs& a) { a.lse = Tensor::empty({2, 4}, DType::bf16); }), {{"lse"}}},
      {"lse shape", with([](PagedArgs& a) { a.lse = Tensor::empty({2, 4, 1, 1}, DType::f32); }), {{"lse"}}},
      {"Hq % Hkv", with([](PagedArgs& a) {
         a.hq = 3;
         a.q = Tensor::zeros({2, 3, 64}, DType::f32);
         a.out = Tensor::empty({2, 3, 64}, DType::f32);
         a.lse = Tensor::empty({2, 3}, DType::f32);
       }), {{"hq", "heads", "num_qo_heads"}}},
      {"head_dim 12", with(bad_pages(12)), {{"head_dim"}, {"12"}}},
      {"head_dim 264", with(bad_pages(264)), {{"head_dim"}, {"264"}}},
      {"q head_dim != pages", with([](PagedArgs& a) {
         a.q = Tensor::zeros({2, 4, 32}, DType::f32);
         a.out = Tensor::empty({2, 4, 32}, DType::f32);
       }), {{"q:", "query", "q ", "head_dim"}}},
      {"table int64 on the run", [&] {
         PagedArgs a = base;
         const Plan plan = plan_decode(ws, a.pc.host_table, a.pc.kv, a.hq);
         a.pc.kv.table.indices = a.pc.kv.table.indices.to(DType::i64);
         batch_decode(ws, plan, a.q, a.pc.kv, {}, a.out, a.lse);
       }, {{"indices"}}},
      {"plan for other heads", [&] {
         PagedArgs a = base;
         const Plan plan = plan_decode(ws, a.pc.host_table, a.pc.kv, 2);
         batch_decode(ws, plan, a.q, a.pc.kv, {}, a.out, a.lse);
       }, {{"plan"}}},
      {"plan of a prefill", [&] {
         PagedArgs a = base;
         const Plan plan = plan_prefill(ws, Tensor(), a.pc.host_table, a.pc.kv, 1, a.hq);
         batch_decode(ws, plan, a.q, a.pc.kv, {}, a.out, a.lse);
       }, {{"plan"}}},
      {"plan of another workspace", [&] {
         PagedArgs a = base;
         Workspace mine(Device::cpu(), size_t(8) << 20), other(Device::cpu(), size_t(8) << 20);
         plan_decode(mine, a.pc.host_table, a.pc.kv, a.hq);  // both at their first plan
         const Plan plan = plan_decode(other, a.pc.host_table, a.pc.kv, a.hq);
         batch_decode(mine, plan, a.q, a.pc.kv, {}, a.out, a.lse);
       }, {{"plan"}, {"its own workspace"}}},
      {"stale plan", [&] {
         PagedArgs a = base;
         const Plan plan = plan_decode(ws, a.pc.host_table, a.pc.kv, a.hq);
         plan_decode(ws, a.pc.host_table, a.pc.kv, a.hq);  // a newer plan replaces the work list
         batch_decode(ws, plan, a.q, a.pc.kv, {}, a.out, a.lse);
       }, {{"plan"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

TEST(Errors, PrefillPaged) {
  FP_SEEDED_RNG(rng);
  const PagedArgs base = valid_decode(rng);
  const Tensor q = random_tensor(rng, {2, 4, 3, 64}, DType::f32, Device::cpu());
  const Tensor qr = random_tensor(rng, {5, 4, 64}, DType::f32, Device::cpu());
  const Tensor qo = host_ints({0, 2, 5});
  ASSERT_NO_THROW(batch_prefill_paged(q, Tensor(), base.pc.kv));
  ASSERT_NO_THROW(batch_prefill_paged(qr, qo, base.pc.kv));
  ASSERT_NO_THROW(batch_prefill_paged(q, Tensor(), base.pc.kv, Tensor::zeros({3, 17}, DType::boolean)));
  const auto& kv = base.pc.kv;
  const std::vector<ErrorCase> cases{
      {"q rank 2", [&] { batch_prefill_paged(Tensor::zeros({6, 256}, DType::f32), Tensor(), kv); }, {kQ}},
      {"q batch != table", [&] { batch_prefill_paged(Tensor::zeros({3, 4, 3, 64}, DType::f32), Tensor(), kv); }, {kQ}},
      {"q ragged without qo_indptr", [&] { batch_prefill_paged(qr, Tensor(), kv); }, {{"q:", "query", "q ", "qo_indptr"}}},
      {"qo_indptr int64", [&] { batch_prefill_paged(qr, host_ints({0, 2, 5}, DType::i64), kv); }, {{"qo_indptr"}}},
      {"qo_indptr size", [&] { batch_prefill_paged(qr, host_ints({0, 5}), kv); }, {{"qo_indptr"}}},
      {"qo_indptr decreasing", [&] { batch_prefill_paged(qr, host_ints({0, 3, 2}), kv); }, {{"qo_indptr"}}},
      {"qo_indptr[0] != 0", [&] { batch_prefill_paged(qr, host_ints({1, 2, 5}), kv); }, {{"qo_indptr"}}},
      {"qo_indptr past q", [&] { batch_prefill_paged(qr, host_ints({0, 2, 6}), kv); }, {{"qo_indptr", "q:", "query"}}},
      {"mask with ragged queries", [&] { batch_prefill_paged(qr, qo, kv, Tensor::zeros({3, 17}, DType::boolean)); }, {{"mask"}}},
      {"mask rows != S", [&] { batch_prefill_paged(q, Tensor(), kv, Tensor::zeros({4, 17}, DType::boolean)); }, {{"mask"}}},
      {"mask cols != longest row", [&] { batch_prefill_paged(q, Tensor(), kv, Tensor::zeros({3, 16}, DType::boolean)); }, {{"mask"}}},
      {"mask batch", [&] { batch_prefill_paged(q, Tensor(), kv, Tensor::zeros({3, 3, 17}, DType::f32)); }, {{"mask"}}},
      {"mask heads 2", [&] { batch_prefill_paged(q, Tensor(), kv, Tensor::zeros({2, 2, 3, 17}, DType::f32)); }, {{"mask"}}},
      {"mask rank 1", [&] { batch_prefill_paged(q, Tensor(), kv, Tensor::zeros({17}, DType::f32)); }, {{"mask"}}},
      {"mask int dtype", [&] { batch_prefill_paged(q, Tensor(), kv, Tensor::zeros({3, 17}, DType::i32)); }, {{"mask"}}},
      {"k dtype != q", [&] { batch_prefill_paged(q.to(DType::bf16), Tensor(), kv); }, {{"q:", "query", "q ", "k_pages", "pages"}}},
      {"Hq % Hkv", [&] { batch_prefill_paged(Tensor::zeros({2, 3, 3, 64}, DType::f32), Tensor(), kv); }, {{"hq", "heads", "num_qo_heads"}}},
      {"out shape", [&] {
         Workspace ws(Device::cpu(), size_t(4) << 20);
         const Plan plan = plan_prefill(ws, Tensor(), base.pc.host_table, kv, 3, 4);
         Tensor out = Tensor::empty({2, 4, 2, 64}, DType::f32);
         batch_prefill_paged(ws, plan, q, Tensor(), kv, Tensor(), {}, out);
       }, {{"out"}}},
      {"lse shape", [&] {
         Workspace ws(Device::cpu(), size_t(4) << 20);
         const Plan plan = plan_prefill(ws, Tensor(), base.pc.host_table, kv, 3, 4);
         Tensor out = Tensor::empty({2, 4, 3, 64}, DType::f32);
         batch_prefill_paged(ws, plan, q, Tensor(), kv, Tensor(), {}, out, Tensor::empty({2, 4}, DType::f32));
       }, {{"lse"}}},
      {"plan for another query length", [&] {
         Workspace ws(Device::cpu(), size_t(4) << 20);
         const Plan plan = plan_prefill(ws, Tensor(), base.pc.host_table, kv, 2, 4);
         Tensor out = Tensor::empty({2, 4, 3, 64}, DType::f32);
         batch_prefill_paged(ws, plan, q, Tensor(), kv, Tensor(), {}, out);
       }, {{"plan"}}},
      {"ragged plan, uniform run", [&] {  // both 6 query rows; the split differs
         Workspace ws(Device::cpu(), size_t(4) << 20);
         const Plan plan = plan_prefill(ws, host_ints({0, 2, 6}), base.pc.host_table, kv, 0, 4);
         Tensor out = Tensor::empty({2, 4, 3, 64}, DType::f32);
         batch_prefill_paged(ws, plan, q, Tensor(), kv, Tensor(), {}, out);
       }, {{"plan: made for ragged queries"}}},
      {"uniform plan, ragged run", [&] {
         Workspace ws(Device::cpu(), size_t(4) << 20);
         const Plan plan = plan_prefill(ws, Tensor(), base.pc.host_table, kv, 3, 4);
         const Tensor q6 = Tensor::zeros({6, 4, 64}, DType::f32);
         Tensor out = Tensor::empty({6, 4, 64}, DType::f32);
         batch_prefill_paged(ws, plan, q6, host_ints({0, 2, 6}), kv, Tensor(), {}, out);
       }, {{"plan: made for uniform queries"}}},
      {"plan_prefill qo_indptr size", [&] {
         Workspace ws(Device::cpu(), size_t(4) << 20);
         plan_prefill(ws, host_ints({0, 1, 2, 3}), base.pc.host_table, kv, 0, 4);
       }, {{"qo_indptr"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

// ---- ragged ---------------------------------------------------------------------------------
TEST(Errors, PrefillRagged) {
  FP_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {7, 4, 64}, DType::f32, Device::cpu());
  const Tensor k = random_tensor(rng, {9, 2, 64}, DType::f32, Device::cpu());
  const Tensor qo = host_ints({0, 3, 7}), kvp = host_ints({0, 4, 9});
  ASSERT_NO_THROW(batch_prefill_ragged(q, k, k, qo, kvp));
  const std::vector<ErrorCase> cases{
      {"q rank 4", [&] { batch_prefill_ragged(q.view({7, 4, 1, 64}), k, k, qo, kvp); }, {kQ}},
      {"k rank 2", [&] { batch_prefill_ragged(q, k.view({9, 128}), k, qo, kvp); }, {kK}},
      {"v shape != k", [&] { batch_prefill_ragged(q, k, k.slice(0, 0, 8), qo, kvp); }, {kV}},
      {"k dtype != q", [&] { batch_prefill_ragged(q, k.to(DType::f16), k.to(DType::f16), qo, kvp); }, {kK}},
      {"qo_indptr int64", [&] { batch_prefill_ragged(q, k, k, host_ints({0, 3, 7}, DType::i64), kvp); }, {{"qo_indptr"}}},
      {"kv_indptr int64", [&] { batch_prefill_ragged(q, k, k, qo, host_ints({0, 4, 9}, DType::i64)); }, {{"kv_indptr"}}},
      {"kv_indptr size", [&] { batch_prefill_ragged(q, k, k, qo, host_ints({0, 9})); }, {{"kv_indptr"}}},
      {"qo_indptr decreasing", [&] { batch_prefill_ragged(q, k, k, host_ints({0, 5, 4}), kvp); }, {{"qo_indptr"}}},
      {"qo_indptr[0] != 0", [&] { batch_prefill_ragged(q, k, k, host_ints({2, 3, 7}), kvp); }, {{"qo_indptr"}}},
      {"qo_indptr past q", [&] { batch_prefill_ragged(q, k, k, host_ints({0, 3, 8}), kvp); }, {{"qo_indptr"}}},
      {"kv_indptr past k", [&] { batch_prefill_ragged(q, k, k, qo, host_ints({0, 4, 10})); }, {{"kv_indptr"}}},
      {"kv_indptr decreasing", [&] { batch_prefill_ragged(q, k, k, qo, host_ints({0, 5, 4})); }, {{"kv_indptr"}}},
      {"self-attention past k", [&] { batch_prefill_ragged(q, k.slice(0, 0, 5), k.slice(0, 0, 5), qo); }, {{"qo_indptr", "kv_indptr", "k:", "key"}}},
      {"Hq % Hkv", [&] {
         const Tensor k3 = Tensor::zeros({9, 3, 64}, DType::f32);
         batch_prefill_ragged(q, k3, k3, qo, kvp);
       }, {{"hq", "heads", "num_qo_heads"}}},
      {"head_dim 12", [&] {
         batch_prefill_ragged(Tensor::zeros({7, 4, 12}, DType::f32), Tensor::zeros({9, 2, 12}, DType::f32),
                              Tensor::zeros({9, 2, 12}, DType::f32), qo, kvp);
       }, {{"head_dim"}}},
      {"out dtype", [&] {
         Tensor out = Tensor::empty({7, 4, 64}, DType::bf16);
         batch_prefill_ragged(q, k, k, qo, kvp, {}, out);
       }, {{"out"}}},
      {"lse not f32", [&] {
         Tensor out = Tensor::empty({7, 4, 64}, DType::f32);
         batch_prefill_ragged(q, k, k, qo, kvp, {}, out, Tensor::empty({7, 4}, DType::f16));
       }, {{"lse"}}},
      {"lse shape", [&] {
         Tensor out = Tensor::empty({7, 4, 64}, DType::f32);
         batch_prefill_ragged(q, k, k, qo, kvp, {}, out, Tensor::empty({7, 4, 1}, DType::f32));
       }, {{"lse"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

// ---- merge_states, append/gather ------------------------------------------------------------
TEST(Errors, MergeStates) {
  const Tensor v = Tensor::zeros({5, 4, 64}, DType::f32), l = Tensor::zeros({5, 4}, DType::f32);
  {
    Tensor out = v.clone();
    ASSERT_NO_THROW(merge_states(v, l, v, l, out));
  }
  auto call = [](Tensor va, Tensor la, Tensor vb, Tensor lb, Tensor out, Tensor lse = {}) {
    return [=]() mutable { merge_states(va, la, vb, lb, out, lse); };
  };
  const Tensor out = Tensor::empty({5, 4, 64}, DType::f32);
  const std::vector<ErrorCase> cases{
      {"v_a rank 2", call(v.view({20, 64}), l, v, l, out), {{"v_a"}}},
      {"v_b shape", call(v, l, v.slice(0, 0, 4), l, out), {{"v_b"}}},
      {"lse_a dtype", call(v, l.to(DType::f16), v, l, out), {{"lse_a"}}},
      {"lse_b shape", call(v, l, v, Tensor::zeros({5, 3}, DType::f32), out), {{"lse_b"}}},
      {"v_out shape", call(v, l, v, l, Tensor::empty({5, 4, 32}, DType::f32)), {{"v_out"}}},
      {"lse_out dtype", call(v, l, v, l, out, Tensor::empty({5, 4}, DType::bf16)), {{"lse_out"}}},
      {"lse_out shape", call(v, l, v, l, out, Tensor::empty({4, 4}, DType::f32)), {{"lse_out"}}},
      {"v integer", call(Tensor::zeros({5, 4, 64}, DType::i32), l, Tensor::zeros({5, 4, 64}, DType::i32), l,
                         Tensor::zeros({5, 4, 64}, DType::i32)), {{"v_a"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

TEST(Errors, AppendGather) {
  FP_SEEDED_RNG(rng);
  const PagedCase pc = random_paged(rng, {5, 17}, 16, 2, 64, KvLayout::NHD, DType::f32, Device::cpu());
  const Tensor k = Tensor::zeros({3, 2, 64}, DType::f32);
  // Row 0 has one page (16 slots), row 1 two.
  const Tensor rows = host_ints({0, 1, 1}), pos = host_ints({4, 0, 16});
  ASSERT_NO_THROW(append_paged_kv(k, k, rows, pos, pc.kv));
  const std::vector<ErrorCase> cases{
      {"k rank 2", [&] { append_paged_kv(k.view({3, 128}), k, rows, pos, pc.kv); }, {kK}},
      {"v shape", [&] { append_paged_kv(k, k.slice(0, 0, 2), rows, pos, pc.kv); }, {kV}},
      {"k heads != pages", [&] {
         const Tensor k4 = Tensor::zeros({3, 4, 64}, DType::f32);
         append_paged_kv(k4, k4, rows, pos, pc.kv);
       }, {kK}},
      {"k dtype != pages", [&] { append_paged_kv(k.to(DType::bf16), k.to(DType::bf16), rows, pos, pc.kv); }, {{"k:", "key", "k ", "k_pages"}}},
      {"batch_indices int64", [&] { append_paged_kv(k, k, host_ints({0, 1, 1}, DType::i64), pos, pc.kv); }, {{"batch_indices"}}},
      {"batch_indices size", [&] { append_paged_kv(k, k, host_ints({0, 1}), pos, pc.kv); }, {{"batch_indices"}}},
      {"batch_indices out of range", [&] { append_paged_kv(k, k, host_ints({0, 2, 1}), pos, pc.kv); }, {{"batch_indices"}}},
      {"batch_indices negative", [&] { append_paged_kv(k, k, host_ints({0, -1, 1}), pos, pc.kv); }, {{"batch_indices"}}},
      {"positions int64", [&] { append_paged_kv(k, k, rows, host_ints({4, 0, 16}, DType::i64), pc.kv); }, {{"positions"}}},
      {"positions past the row", [&] { append_paged_kv(k, k, rows, host_ints({16, 0, 16}), pc.kv); }, {{"positions"}}},
      {"positions past the row's pages", [&] { append_paged_kv(k, k, rows, host_ints({4, 0, 32}), pc.kv); }, {{"positions"}}},
      {"positions negative", [&] { append_paged_kv(k, k, rows, host_ints({0, -1, 16}), pc.kv); }, {{"positions"}}},
      {"gather k_out rows", [&] {
         Tensor ko = Tensor::empty({21, 2, 64}, DType::f32), vo = Tensor::empty({22, 2, 64}, DType::f32);
         gather_paged_kv(pc.kv, ko, vo);
       }, {{"k_out"}}},
      {"gather v_out dtype", [&] {
         Tensor ko = Tensor::empty({22, 2, 64}, DType::f32), vo = Tensor::empty({22, 2, 64}, DType::f16);
         gather_paged_kv(pc.kv, ko, vo);
       }, {{"v_out"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

// ---- tensors --------------------------------------------------------------------------------
// Sizes that overflow int64 (as elements or bytes) would wrap to a small allocation that
// later writes overrun; negative sizes or strides would address memory outside the storage.
TEST(Errors, Tensors) {
  constexpr int64_t kHuge = int64_t(1) << 32, kHalf = int64_t(1) << 62;
  float blob[6] = {};
  const Tensor six = Tensor::zeros({6}, DType::f32), none = Tensor::zeros({0}, DType::f32);
  ASSERT_NO_THROW(Tensor::from_blob(nullptr, {0, 8}, DType::f32));  // no elements: no pointer
  ASSERT_NO_THROW(six.view({2, -1}));
  ASSERT_NO_THROW(six.as_strided({2, 2}, {1, 2}));
  ASSERT_NO_THROW(Tensor::empty({kHuge, kHuge, 0}, DType::f32));  // no elements
  const std::vector<ErrorCase> cases{
      {"empty elements overflow", [] { Tensor::empty({kHuge, kHuge}, DType::f32); },
       {{"Tensor::empty"}, {"2^63-1"}, {"[4294967296,4294967296]"}}},
      {"empty bytes overflow", [] { Tensor::empty({kHalf}, DType::f32); },
       {{"Tensor::empty"}, {"2^63-1"}, {"f32"}}},
      {"empty negative", [] { Tensor::empty({3, -2}, DType::f32); }, {{"Tensor::empty"}, {"[3,-2]"}}},
      {"view negative sizes", [&] { six.view({-2, -3}); }, {{"Tensor::view"}, {"[-2,-3]"}}},
      {"view -1 over no elements", [&] { none.view({0, -1}); }, {{"Tensor::view"}, {"-1"}}},
      {"view two -1", [&] { six.view({-1, -1}); }, {{"Tensor::view"}, {"-1"}}},
      {"view wrong count", [&] { six.view({4, 2}); }, {{"Tensor::view"}, {"[4,2]"}}},
      {"as_strided negative stride", [&] { six.as_strided({2}, {-1}); },
       {{"Tensor::as_strided"}, {"strides"}}},
      {"as_strided negative size", [&] { six.as_strided({-1}, {1}); },
       {{"Tensor::as_strided"}, {"[-1]"}}},
      {"as_strided past the storage", [&] { six.as_strided({2, 3}, {3, 2}); },
       {{"Tensor::as_strided"}, {"past the storage"}}},
      {"as_strided reach overflows", [&] { six.as_strided({3}, {kHalf}); },
       {{"Tensor::as_strided"}, {"past the storage"}}},
      {"from_blob null scalar", [] { Tensor::from_blob(nullptr, {}, DType::f32); },
       {{"from_blob"}, {"data"}, {"null"}}},
      {"from_blob null", [] { Tensor::from_blob(nullptr, {2, 3}, DType::f32); },
       {{"from_blob"}, {"data"}, {"6 elements"}}},
      {"from_blob negative size", [&] { Tensor::from_blob(blob, {-4, 1}, DType::f32); },
       {{"from_blob"}, {"[-4,1]"}}},
      {"from_blob negative stride", [&] { Tensor::from_blob(blob, {2, 3}, DType::f32, Device::cpu(), {-3, 1}); },
       {{"from_blob"}, {"strides"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

// ---- parsers and devices --------------------------------------------------------------------
TEST(Errors, Parsers) {
  const std::vector<ErrorCase> cases{
      {"parse_backend flash", [] { parse_backend("flash"); }, {{"expected torch_native|flashinfer"}, {"flash"}}},
      {"parse_backend torch", [] { parse_backend("torch"); }, {{"expected torch_native|flashinfer"}}},
      {"parse_backend underscore", [] { parse_backend("flash_infer_x"); }, {{"expected torch_native|flashinfer"}}},
      {"parse_dtype f64", [] { parse_dtype("f64"); }, {{"dtype"}, {"f64"}}},
      {"parse_dtype empty", [] { parse_dtype(""); }, {{"dtype"}}},
      {"parse_layout", [] { parse_layout("nhdd"); }, {{"layout", "nhd|hnd"}, {"nhdd"}}},
      {"parse_layout empty", [] { parse_layout(""); }, {{"layout", "nhd|hnd"}}},
      {"parse_device tpu", [] { parse_device("tpu"); }, {{"device"}, {"tpu"}}},
      {"parse_device cuda:x", [] { parse_device("cuda:x"); }, {{"device"}}},
      {"parse_device cuda:-1", [] { parse_device("cuda:-1"); }, {{"device"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

TEST(Errors, CudaInCpuOnlyBuild) {
  if (cuda_built()) GTEST_SKIP() << "CUDA is built in";
  const std::vector<ErrorCase> cases{
      {"Tensor::empty on cuda", [] { Tensor::empty({4}, DType::f32, Device::cuda(0)); }, {{"cuda"}}},
      {"Tensor::to(cuda)", [] { Tensor::zeros({4}, DType::f32).to(Device::cuda(0)); }, {{"cuda"}}},
      {"Workspace on cuda", [] { Workspace ws(Device::cuda(0), size_t(4) << 20); }, {{"cuda"}}},
      {"KvCachePool on cuda", [] {
         KvCacheConfig cfg;
         cfg.kv_heads = 2;
         cfg.head_dim = 64;
         cfg.num_pages = 4;
         cfg.device = Device::cuda(0);
         KvCachePool pool(cfg);
       }, {{"cuda"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

TEST(Errors, CudaDeviceMismatch) {
  FP_REQUIRE_CUDA();
  FP_SEEDED_RNG(rng);
  const SdpaArgs base = valid_sdpa(rng, cuda0());
  auto with = [&](std::function<void(SdpaArgs&)> edit) {
    return [=] {
      SdpaArgs a = base;
      edit(a);
      a.call();
    };
  };
  auto bf = [](SdpaArgs& a) {
    for (Tensor* t : {&a.q, &a.k, &a.v, &a.out}) *t = t->to(Device::cpu()).to(DType::bf16).to(cuda0());
  };
  {
    SdpaArgs a = base;
    bf(a);
    ASSERT_NO_THROW(a.call());
  }
  PagedCase pc = random_paged(rng, {5, 17}, 16, 2, 64, KvLayout::NHD, DType::bf16, cuda0());
  const Tensor q = random_tensor(rng, {2, 4, 64}, DType::bf16, cuda0());
  const std::vector<ErrorCase> cases{
      {"k on cpu", with([&](SdpaArgs& a) { bf(a); a.k = a.k.to(Device::cpu()); }), {kK}},
      {"out on cpu", with([&](SdpaArgs& a) { bf(a); a.out = a.out.to(Device::cpu()); }), {{"out"}}},
      {"lse on cpu", with([&](SdpaArgs& a) { bf(a); a.lse = a.lse.to(Device::cpu()); }), {{"lse"}}},
      {"mask on cpu", with([&](SdpaArgs& a) { bf(a); a.mask = Tensor::zeros({3, 5}, DType::boolean); }), {{"mask"}}},
      {"q on cpu, pages on cuda", [&] { batch_decode(q.to(Device::cpu()), pc.kv); }, {kQ}},
      {"table on cpu, pages on cuda", [&] {
         PagedKv kv = pc.kv;
         kv.table = pc.host_table;
         Workspace ws(cuda0(), size_t(8) << 20);
         const Plan plan = plan_decode(ws, pc.host_table, pc.kv, 4);
         Tensor out = Tensor::empty({2, 4, 64}, DType::bf16, cuda0());
         batch_decode(ws, plan, q, kv, {}, out);
       }, {{"indptr", "indices", "last_page_len", "table"}}},
      {"workspace on cpu", [&] {
         Workspace ws(Device::cpu(), size_t(8) << 20);
         plan_decode(ws, pc.host_table, pc.kv, 4);
       }, {{"workspace"}}},
      {"ragged q on cpu", [&] {
         const Tensor kk = random_tensor(rng, {9, 2, 64}, DType::bf16, cuda0());
         batch_prefill_ragged(random_tensor(rng, {7, 4, 64}, DType::bf16, Device::cpu()), kk, kk,
                              host_ints({0, 3, 7}).to(cuda0()), host_ints({0, 4, 9}).to(cuda0()));
       }, {kQ}},
      {"merge lse_b on cpu", [&] {
         const Tensor v = Tensor::zeros({5, 4, 64}, DType::bf16, cuda0());
         const Tensor l = Tensor::zeros({5, 4}, DType::f32, cuda0());
         Tensor out = v.clone();
         merge_states(v, l, v, l.to(Device::cpu()), out);
       }, {{"lse_b"}}},
      {"head_dim 264 on cuda", [&] {
         const Tensor t = Tensor::zeros({1, 2, 3, 264}, DType::bf16, cuda0());
         sdpa(t, t, t);
       }, {{"head_dim"}}},
  };
  for (const auto& c : cases) expect_error(c);
}

// ---- outputs that are broadcast views -------------------------------------------------------
// An output with stride 0 on a dim of several elements would have several writers per element
// (in no fixed order on CUDA): every op refuses one, naming it.
TEST(Errors, BroadcastOutputs) {
  FP_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {2, 4, 3, 64}, DType::f32, Device::cpu());
  const Tensor k = random_tensor(rng, {2, 4, 5, 64}, DType::f32, Device::cpu());
  const Tensor one_row = Tensor::empty({1, 4, 3, 64}, DType::f32);
  const Tensor one_lse = Tensor::empty({1, 4, 3}, DType::f32);
  const Tensor va = random_tensor(rng, {3, 2, 64}, DType::f32, Device::cpu());
  const Tensor la = random_tensor(rng, {3, 2}, DType::f32, Device::cpu());
  const std::vector<ErrorCase> cases{
      {"sdpa out broadcast over B", [&] {
         Tensor out = one_row.as_strided({2, 4, 3, 64}, {0, 192, 64, 1});
         sdpa(q, k, k, Tensor(), {}, out);
       }, {{"out:"}, {"stride 0"}}},
      {"sdpa lse broadcast over B", [&] {
         Tensor out = Tensor::empty({2, 4, 3, 64}, DType::f32);
         sdpa(q, k, k, Tensor(), {}, out, one_lse.as_strided({2, 4, 3}, {0, 3, 1}));
       }, {{"lse:"}, {"stride 0"}}},
      {"merge_states v_out broadcast", [&] {
         Tensor out = Tensor::empty({1, 2, 64}, DType::f32).as_strided({3, 2, 64}, {0, 64, 1});
         merge_states(va, la, va, la, out);
       }, {{"v_out:"}, {"stride 0"}}},
      {"merge_states lse_out broadcast", [&] {
         Tensor out = Tensor::empty({3, 2, 64}, DType::f32);
         merge_states(va, la, va, la, out, Tensor::empty({2}, DType::f32).as_strided({3, 2}, {0, 1}));
       }, {{"lse_out:"}, {"stride 0"}}},
  };
  for (const auto& c : cases) expect_error(c);
  // A size-1 dim may have any stride, 0 included.
  Tensor out = Tensor::empty({1, 4, 3, 64}, DType::f32).as_strided({1, 4, 3, 64}, {0, 192, 64, 1});
  EXPECT_NO_THROW(sdpa(q.slice(0, 0, 1), k.slice(0, 0, 1), k.slice(0, 0, 1), Tensor(), {}, out));
}

// Outputs that share memory with an input: other blocks (threads) would read input elements
// after some outputs were written. The same first element or two dense views whose ranges
// meet are refused; merge_states (element-wise) takes an output that is exactly an input.
TEST(Errors, OverlappingOutputs) {
  FP_SEEDED_RNG(rng);
  const Tensor q = random_tensor(rng, {2, 4, 3, 64}, DType::f32, Device::cpu());
  const Tensor k = random_tensor(rng, {2, 4, 5, 64}, DType::f32, Device::cpu());
  // One buffer of [q | out]: out shifted by half a head into q's range.
  const Tensor both = random_tensor(rng, {2 * 2 * 4 * 3 * 64}, DType::f32, Device::cpu());
  const Tensor q_of_both = both.slice(0, 0, 1536).view({2, 4, 3, 64});
  const Tensor va = random_tensor(rng, {3, 2, 64}, DType::f32, Device::cpu());
  const Tensor la = random_tensor(rng, {3, 2}, DType::f32, Device::cpu());
  const PagedCase pc =
      random_paged(rng, {5, 17}, 16, 2, 64, KvLayout::NHD, DType::f32, Device::cpu());
  const Tensor qd = random_tensor(rng, {2, 4, 64}, DType::f32, Device::cpu());
  const std::vector<ErrorCase> cases{
      {"sdpa out is q", [&] {
         Tensor out = q;
         sdpa(q, k, k, Tensor(), {}, out);
       }, {{"out:"}, {"query"}, {"overlap"}}},
      {"sdpa out shifted into q", [&] {
         Tensor out = both.slice(0, 32, 32 + 1536).view({2, 4, 3, 64});
         sdpa(q_of_both, k, k, Tensor(), {}, out);
       }, {{"out:"}, {"query"}}},
      {"sdpa out is v", [&] {
         Tensor out = Tensor::empty({2, 4, 3, 64}, DType::f32);
         Tensor v = out.as_strided({2, 4, 3, 64}, out.strides());  // L = S = 3 here
         sdpa(q, q, v, Tensor(), {}, out);
       }, {{"out:"}, {"value"}}},
      {"sdpa lse inside out", [&] {
         Tensor out = Tensor::empty({2, 4, 3, 64}, DType::f32);
         sdpa(q, k, k, Tensor(), {}, out, out.view({-1}).slice(0, 0, 24).view({2, 4, 3}));
       }, {{"lse:"}, {"out"}}},
      {"ragged out is q", [&] {
         const Tensor qr = q.view({24, 4, 16});
         Tensor out = qr;
         batch_prefill_ragged(qr, qr, qr, host_ints({0, 24}), Tensor(), {}, out);
       }, {{"out:"}, {"query"}}},
      {"decode out is q", [&] {
         Workspace ws(Device::cpu(), size_t(8) << 20);
         const Plan plan = plan_decode(ws, pc.host_table, pc.kv, 4);
         Tensor out = qd;
         batch_decode(ws, plan, qd, pc.kv, {}, out);
       }, {{"out:"}, {"query"}}},
      {"decode out in the pages", [&] {
         Workspace ws(Device::cpu(), size_t(8) << 20);
         const Plan plan = plan_decode(ws, pc.host_table, pc.kv, 4);
         Tensor out = pc.kv.v_pages.view({-1}).slice(0, 0, 512).view({2, 4, 64});
         batch_decode(ws, plan, qd, pc.kv, {}, out);
       }, {{"out:"}, {"v_pages"}}},
      {"merge v_out shifted over v_a", [&] {
         Tensor buf = random_tensor(rng, {4 * 2 * 64}, DType::f32, Device::cpu());
         Tensor a = buf.slice(0, 0, 384).view({3, 2, 64});
         Tensor out = buf.slice(0, 64, 448).view({3, 2, 64});
         merge_states(a, la, va, la, out);
       }, {{"v_out:"}, {"v_a"}}},
      {"gather v_out is k_out", [&] {
         Tensor ko = Tensor::empty({22, 2, 64}, DType::f32);
         Tensor vo = ko;
         gather_paged_kv(pc.kv, ko, vo);
       }, {{"v_out:"}, {"k_out"}}},
  };
  for (const auto& c : cases) expect_error(c);
  // Allowed: merge_states in place over either input, and views of one buffer that do not
  // meet (q and out side by side).
  Tensor in_place = va.clone();
  EXPECT_NO_THROW(merge_states(in_place, la, va, la, in_place));
  Tensor lse_in_place = la.clone();
  EXPECT_NO_THROW(merge_states(va, lse_in_place, va, la, in_place, lse_in_place));
  Tensor beside = both.slice(0, 1536, 3072).view({2, 4, 3, 64});
  EXPECT_NO_THROW(sdpa(q_of_both, k, k, Tensor(), {}, beside));
}

}  // namespace
}  // namespace fpt
