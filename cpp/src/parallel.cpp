// Thread-count setting and the parallel_for used by the CPU kernels: a persistent pool of
// num_threads() − 1 workers plus the calling thread, so that small batched calls (training loops)
// do not pay for thread creation on every call.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>  // sched_getaffinity, CPU_COUNT (glibc; g++ defines _GNU_SOURCE)
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define LSA_HAVE_PTHREAD_ATFORK 1
#endif

#include "common/interrupt.hpp"
#include "common/parallel.hpp"
#include "lsa_native/device.hpp"

namespace lsa_native {
namespace {

std::atomic<int> g_num_threads{0};  // 0: hardware default
// Threads the system let the pool start (workers + the caller) when it refused one more
// (std::system_error: an address-space or process limit); 0: no refusal seen. Caps num_threads().
std::atomic<int> g_thread_cap{0};
std::atomic<InterruptCheck> g_interrupt_check{nullptr};

// The CPUs this process may run on (taskset, a container's cpuset), not every CPU of the machine:
// a pool sized to the machine oversubscribes a process restricted to a few of its cores. (The
// calling thread's mask: the process's, unless that thread narrowed its own.)
int default_threads() {
#if defined(__linux__)
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0)
    return CPU_COUNT(&allowed);
#endif
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

// One job at a time: tasks [0, n) of `fn`, handed out through an atomic counter.
class Pool {
 public:
  // Runs the job on `workers` pool threads plus the caller. Returns false (and runs nothing) when
  // another caller holds the pool; that caller's job is unaffected.
  bool run(index_t n_tasks, int workers, const std::function<void(index_t)>& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    resize(workers);
    {
      std::lock_guard<std::mutex> lock(m_);
      fn_ = &fn;
      n_tasks_ = n_tasks;
      next_.store(0);
      error_ = nullptr;
      active_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void work() {
    const auto& fn = *fn_;
    for (index_t i = next_.fetch_add(1); i < n_tasks_; i = next_.fetch_add(1)) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_tasks_);
      }
    }
  }
  // `seen` is the generation current when the worker was started: a worker added by resize()
  // between two jobs must wait for the next job, not run the finished one (which would count it
  // twice in active_: a hang, or the caller returning while a worker still runs its task).
  void loop(unsigned long seen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      work();
      std::lock_guard<std::mutex> lock(m_);
      if (--active_ == 0) done_.notify_one();
    }
  }
  void resize(int workers) {  // called with busy_ held
    if (static_cast<int>(threads_.size()) == workers) return;
    stop_workers();
    const unsigned long current = generation_;  // stable: only run() changes it, under busy_
    for (int w = 0; w < workers; ++w) {
      try {
        threads_.emplace_back([this, current] { loop(current); });
      } catch (const std::system_error&) {
        // The system refused a thread (a process or address-space limit). The threads started
        // hold that space (their stacks), so keep only half of them: the rest is left for the
        // job's own allocations. Later calls use at most that many (num_threads()).
        const int keep = static_cast<int>(threads_.size()) / 2;
        stop_workers();
        for (int k = 0; k < keep; ++k) {
          try {
            threads_.emplace_back([this, current] { loop(current); });
          } catch (const std::system_error&) {
            break;
          }
        }
        g_thread_cap.store(static_cast<int>(threads_.size()) + 1);
        return;
      }
    }
  }
  void stop_workers() {  // called with busy_ held
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
  }

  std::mutex busy_, m_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(index_t)>* fn_ = nullptr;
  index_t n_tasks_ = 0;
  std::atomic<index_t> next_{0};
  std::exception_ptr error_;
  int active_ = 0;
  unsigned long generation_ = 0;
  bool stop_ = false;
};

// The pool lives for the whole process (its idle workers end with it). After fork() the child
// has none of the workers and possibly a mutex locked by one of them, so the child handler
// abandons the inherited pool (never touched again) and installs a fresh one: the child is
// single-threaded at that point, so this is race-free.
Pool* g_pool = nullptr;
std::once_flag g_pool_once;

Pool& pool() {
  std::call_once(g_pool_once, [] {
    g_pool = new Pool();
#if defined(LSA_HAVE_PTHREAD_ATFORK)
    pthread_atfork(nullptr, nullptr, [] { g_pool = new Pool(); });
#endif
  });
  return *g_pool;
}

}  // namespace

int num_threads() {
  const int n = g_num_threads.load();
  const int cap = g_thread_cap.load();
  const int want = n > 0 ? n : default_threads();
  return cap > 0 ? std::min(want, cap) : want;
}

int set_num_threads(int n) {
  g_num_threads.store(n > 0 ? n : 0);
  g_thread_cap.store(0);  // a new request: try the system again
  // Start the workers now (an empty job), so that a refused thread shows here, in the answer,
  // rather than as fewer threads later.
  if (n > 1) detail::parallel_for(n, [](index_t) {});
  return num_threads();
}

void set_interrupt_check(InterruptCheck check) { g_interrupt_check.store(check); }

namespace detail {

void poll_interrupt() {
  const InterruptCheck check = g_interrupt_check.load(std::memory_order_relaxed);
  if (check == nullptr) return;
  using Clock = std::chrono::steady_clock;
  thread_local Clock::time_point last{};
  const Clock::time_point now = Clock::now();
  if (now - last < std::chrono::duration<double>(kInterruptPollSeconds)) return;
  last = now;
  if (check()) throw Interrupted();
}

void parallel_for(index_t n_tasks, const std::function<void(index_t)>& fn) {
  if (n_tasks <= 0) return;
  // Only the entering thread polls: the host's check (Python's signal handlers) runs there. An
  // Interrupted thrown by a task stops the remaining tasks like any other exception. It polls once
  // on entry too, so that a call polls whichever thread the tasks go to (a warm pool worker can
  // take every task of a short job before the caller takes one).
  poll_interrupt();
  const std::thread::id caller = std::this_thread::get_id();
  const std::function<void(index_t)> polled = [&](index_t i) {
    if (std::this_thread::get_id() == caller) poll_interrupt();
    fn(i);
  };
  const index_t n_workers = std::min<index_t>(num_threads(), n_tasks);
  // Results never depend on which thread ran a task, so running inline (one thread, one task, or
  // the pool busy with a concurrent caller's job) is always correct.
  if (n_workers > 1 && pool().run(n_tasks, static_cast<int>(n_workers - 1), polled)) return;
  for (index_t i = 0; i < n_tasks; ++i) polled(i);
}

}  // namespace detail
}  // namespace lsa_native
