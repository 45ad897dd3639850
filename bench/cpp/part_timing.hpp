// Timing of a step's parts for the standalone part benchmarks (gamma_parts, tokens_step_parts,
// wishart_step_parts): CPU-seconds of the process, so that time the core spends on other
// processes is not counted.
#pragma once

#include <algorithm>
#include <ctime>
#include <vector>

namespace lsa_native::bench {

inline double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The median of `repeats` runs of f in CPU-seconds.
template <class F>
double median_seconds(F&& f, int repeats) {
  std::vector<double> v;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = cpu_seconds();
    f();
    v.push_back(cpu_seconds() - t0);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The fastest of `repeats` runs in CPU-seconds: another process on the core's SMT sibling or a
// preemption only adds time, so the minimum is the part's own cost.
template <class F>
double min_seconds(F&& f, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = cpu_seconds();
    f();
    best = std::min(best, cpu_seconds() - t0);
  }
  return best;
}

}  // namespace lsa_native::bench
