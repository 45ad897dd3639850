// Thread-count setting and the fork-join parallel_for used by the CPU kernels.
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/parallel.hpp"
#include "lsa_native/device.hpp"

namespace lsa_native {
namespace {
std::atomic<int> g_num_threads{0};  // 0: hardware default

int default_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}
}  // namespace

int num_threads() {
  const int n = g_num_threads.load();
  return n > 0 ? n : default_threads();
}

void set_num_threads(int n) { g_num_threads.store(n > 0 ? n : 0); }

namespace detail {

void parallel_for(index_t n_tasks, const std::function<void(index_t)>& fn) {
  if (n_tasks <= 0) return;
  const index_t n_workers = std::min<index_t>(num_threads(), n_tasks);
  if (n_workers <= 1) {
    for (index_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  std::atomic<index_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (index_t i = next.fetch_add(1); i < n_tasks; i = next.fetch_add(1)) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(n_tasks);
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n_workers - 1));
  for (index_t w = 1; w < n_workers; ++w) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace detail
}  // namespace lsa_native
