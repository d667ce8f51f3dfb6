#include "ops/page_table_check.h"

#include <climits>
#include <string>

#include "core/check.h"

namespace flashpage {

void check_page_table_shapes(const PageTable& t, Device device, std::string_view what) {
  const std::string w(what);
  check::dims(t.indptr, w + ".indptr", 1, "[B+1]");
  check::dims(t.indices, w + ".indices", 1, "[num_page_ids]");
  check::dims(t.last_page_len, w + ".last_page_len", 1, "[B]");
  check::require(t.indptr.numel() >= 1, w, ".indptr: expected at least 1 element [B+1], got ",
                 t.indptr.shape_str());
  const int64_t batch = t.indptr.numel() - 1;
  check::size_is(t.last_page_len, w + ".last_page_len", 0, batch, "B = indptr size - 1");
  for (const auto* p : {&t.indptr, &t.indices, &t.last_page_len}) {
    const std::string name = w + (p == &t.indptr ? ".indptr" : p == &t.indices ? ".indices"
                                                                                : ".last_page_len");
    check::same_dtype(*p, name, DType::i32, "CSR page tables are int32");
    check::same_device(*p, name, device, "the pages");
    check::contiguous(*p, name);
  }
}

std::vector<int64_t> check_row_lengths(const PageTable& t, int64_t page_size) {
  check::require(page_size >= 1 && page_size <= 256, "page_size: expected 1..256, got ",
                 page_size);
  check_page_table_shapes(t, Device::cpu(), "page_table");
  const int64_t batch = t.batch_size();
  const int32_t* indptr = t.indptr.data_as<int32_t>();
  const int32_t* last = t.last_page_len.data_as<int32_t>();
  check::require(indptr[0] == 0, "page_table.indptr: expected indptr[0] == 0, got ", indptr[0]);
  std::vector<int64_t> lengths(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = int64_t(indptr[b + 1]) - indptr[b];
    check::require(pages >= 0, "page_table.indptr: expected non-decreasing values, got indptr[",
                   b, "]=", indptr[b], " > indptr[", b + 1, "]=", indptr[b + 1]);
    if (pages == 0) {
      check::require(last[b] == 0, "page_table.last_page_len: expected 0 for row ", b,
                     " which has no pages, got ", last[b]);
    } else {
      check::require(last[b] >= 1 && last[b] <= page_size,
                     "page_table.last_page_len: expected 1..", page_size, " (page_size) for row ",
                     b, ", got ", last[b]);
    }
    lengths[b] = pages == 0 ? 0 : page_size * (pages - 1) + last[b];
    // Token positions within a row are int32 in the kernels and work lists.
    check::require(lengths[b] <= INT32_MAX, "page_table: expected rows of at most 2^31-1 tokens, ",
                   "got row ", b, " of ", lengths[b], " (", pages, " pages of ", page_size, ")");
  }
  return lengths;
}

std::vector<int64_t> check_page_table(const PageTable& t, int64_t num_pages, int64_t page_size) {
  std::vector<int64_t> lengths = check_row_lengths(t, page_size);
  const int32_t* indptr = t.indptr.data_as<int32_t>();
  const int32_t* indices = t.indices.data_as<int32_t>();
  const int64_t batch = t.batch_size();
  check::require(indptr[batch] <= t.indices.numel(), "page_table.indices: expected at least ",
                 indptr[batch], " entries (indptr[B]), got ", t.indices.numel());
  for (int64_t i = 0; i < indptr[batch]; ++i)
    check::require(indices[i] >= 0 && indices[i] < num_pages, "page_table.indices: expected page ids in [0, ",
                   num_pages, "), got indices[", i, "]=", indices[i]);
  return lengths;
}

void check_pages(const PagedKv& kv) {
  const char* layout = kv.layout == KvLayout::NHD ? "[num_pages, page_size, Hkv, D] (NHD)"
                                                   : "[num_pages, Hkv, page_size, D] (HND)";
  check::dims(kv.k_pages, "k_pages", 4, layout);
  check::dims(kv.v_pages, "v_pages", 4, layout);
  check::shape_is(kv.v_pages, "v_pages", kv.k_pages.shape());
  check::same_dtype(kv.v_pages, "v_pages", kv.k_pages.dtype(), "k_pages");
  check::same_device(kv.v_pages, "v_pages", kv.k_pages.device(), "k_pages");
  check::dtype_in(kv.k_pages, "k_pages", {DType::f32, DType::f16, DType::bf16});
  check::inner_contiguous(kv.k_pages, "k_pages");
  check::inner_contiguous(kv.v_pages, "v_pages");
  check::head_dim(kv.head_dim(), "k_pages");
  check::require(kv.page_size() >= 1 && kv.page_size() <= 256,
                 "k_pages: expected page_size in 1..256, got ", kv.page_size());
}

}  // namespace flashpage
