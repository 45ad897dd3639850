// Interrupt polling: a long batched call stops with Interrupted when the installed check says so,
// and the library works normally afterwards (the pool is not left locked).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "lsa_native/device.hpp"
#include "lsa_native/interrupt.hpp"
#include "lsa_native/lsa.hpp"

namespace {

std::atomic<int> g_checks{0};
bool interrupt_now() {
  ++g_checks;
  return true;
}

TEST(Interrupt, BatchedKernelStopsAndPoolStaysUsable) {
  const lsa_native::LsaShape shape{4096, 3, 7};
  std::vector<double> E(static_cast<size_t>(shape.batch * 4 * 8), 0.25), y(4096);
  std::vector<double> W(16, 0.5);
  for (int threads : {1, 2}) {
    lsa_native::set_num_threads(threads);
    g_checks = 0;
    // Polls are rate-limited per thread: let the interval pass so this call polls at once.
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * lsa_native::kInterruptPollSeconds));
    lsa_native::set_interrupt_check(&interrupt_now);
    EXPECT_THROW(lsa_native::lsa_predict(shape, E.data(), W.data(), W.data(), y.data()),
                 lsa_native::Interrupted);
    EXPECT_GE(g_checks.load(), 1);
    lsa_native::set_interrupt_check(nullptr);
    y.assign(y.size(), -1.0);
    lsa_native::lsa_predict(shape, E.data(), W.data(), W.data(), y.data());
    for (double v : y) EXPECT_NE(v, -1.0);
  }
  lsa_native::set_num_threads(0);
}

}  // namespace
