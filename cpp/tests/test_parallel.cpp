// The persistent pool under changing worker counts: every task runs exactly once per call and the
// caller returns only after all of them. A pool that resized between jobs used to let a new worker
// re-run the finished job (double-counted completion: a hang, or a worker calling a destroyed task).
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "common/parallel.hpp"
#include "lsa_native/device.hpp"

namespace {

TEST(ParallelFor, ResizingPoolRunsEveryTaskOnce) {
  lsa_native::set_num_threads(8);
  for (int round = 0; round < 400; ++round) {
    // n_tasks changes every call, so the pool changes its worker count (min(threads, tasks) − 1).
    const lsa_native::index_t n_tasks = 1 + (round * 7) % 13;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n_tasks));
    lsa_native::detail::parallel_for(n_tasks, [&](lsa_native::index_t i) { ++hits[i]; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
  }
  lsa_native::set_num_threads(0);
}

}  // namespace
