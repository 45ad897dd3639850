// The FMA peak of one core in single precision: 12 independent chains of 8-lane fused multiply-adds
// (enough to cover the FMA latency on every x86-64 core with two FMA pipes), best of 5 timings.
// Prints GFLOP/s (2 FLOPs per lane per FMA) per CPU-second of this thread, so a loaded machine
// disturbs it little. Compiled and run by bench/report_kernel_attention.py (-O2 -mavx2 -mfma).
#include <immintrin.h>

#include <cstdio>
#include <ctime>

static double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

int main() {
  constexpr long kIterations = 10'000'000;
  __m256 c0 = _mm256_set1_ps(0.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0,
         c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = thread_seconds();
    for (long it = 0; it < kIterations; ++it) {
#define LSA_FMA(c) c = _mm256_fmadd_ps(c, a, b)
      LSA_FMA(c0); LSA_FMA(c1); LSA_FMA(c2); LSA_FMA(c3); LSA_FMA(c4); LSA_FMA(c5);
      LSA_FMA(c6); LSA_FMA(c7); LSA_FMA(c8); LSA_FMA(c9); LSA_FMA(c10); LSA_FMA(c11);
#undef LSA_FMA
      // Opaque chains: the compiler can neither hoist nor fold the loop.
      __asm__("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7),
                   "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));
    }
    const double s = thread_seconds() - t0;
    const double gflops = 2.0 * 8 * 12 * double(kIterations) / s / 1e9;
    if (gflops > best) best = gflops;
  }
  const __m256 sum = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
  std::printf("%.3f %g\n", best, double(sum[0]));
  return 0;
}
