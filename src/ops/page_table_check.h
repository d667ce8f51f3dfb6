#pragma once
// Validation of a CSR page table read on the host: every structural error throws Error with
// the argument, the expectation and the value found. Returns the row lengths.
#include <cstdint>
#include <vector>

#include "flashpage/ops.h"

namespace flashpage {

// The row lengths of a host table (indptr, last_page_len and page_size checked; the page ids
// are not read).
std::vector<int64_t> check_row_lengths(const PageTable& host_table, int64_t page_size);
// host_table: int32 CPU tensors. num_pages / page_size: of the pages it addresses.
std::vector<int64_t> check_page_table(const PageTable& host_table, int64_t num_pages,
                                      int64_t page_size);
// Shape/dtype/device checks of a table that lives on `device` (its values are not read).
void check_page_table_shapes(const PageTable& table, Device device, std::string_view what);
// The pages themselves: matching K/V, rank 4, dtype, head_dim.
void check_pages(const PagedKv& kv);

}  // namespace flashpage
