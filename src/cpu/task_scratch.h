#pragma once
// Per-thread scratch of the attention tasks: query rows, their states and accumulators.
// Grown once per thread (to kMaxRows x D), so the per-task loops never allocate.
#include <cstdint>
#include <vector>

#include "cpu/attend.h"

namespace flashpage::cpu {

struct TaskScratch {
  AttendScratch attend;
  QueryRow rows[kMaxRows];
  SoftmaxState states[kMaxRows];
  std::vector<float> q, acc;

  // For row r: q[r * d ..) and acc[r * d ..).
  void reserve(int64_t d) {
    const size_t need = size_t(kMaxRows) * size_t(d);
    if (q.size() < need) q.resize(need);
    if (acc.size() < need) acc.resize(need);
  }
};

inline TaskScratch& task_scratch(int64_t d) {
  thread_local TaskScratch scratch;
  scratch.reserve(d);
  return scratch;
}

}  // namespace flashpage::cpu
