// Where the CPU gamma draws' time goes (issue 22): ns and cycles per variate of simd::fill_gammas
// (n = 2^20, one thread) at shapes 0.5 (the boost), 2.5 and 10, float and double, next to its
// parts on the same counters: Philox alone (the blocks attempt 0 reads), the attempts per variate
// and how often a vector of lanes (8 float, 4 double) needs a second attempt. Also the Wishart step's χ² fill (fill_bartlett_chi2, 8
// prompts per call) at d = 5, N = 20 and d = 20, N = 100. Medians of CPU-seconds of this process;
// cycles = ns × GHZ (argv[1], default /proc/cpuinfo's). Compiled with a table's flags, e.g. AVX2:
//   g++ -O3 -std=c++17 -mavx2 -mfma -DNDEBUG -Icpp/src -Icpp/include -IBUILD/generated
//       bench/cpp/gamma_parts.cpp -o /tmp/gamma_parts && /tmp/gamma_parts
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "cpu/simd_random.hpp"
#include "part_timing.hpp"

namespace {

using lsa_native::index_t;
namespace simd = lsa_native::cpu::simd;
namespace rng = lsa_native::rng;

using lsa_native::bench::median_seconds;

double ghz_from_cpuinfo() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("cpu MHz", 0) == 0) return std::atof(line.substr(line.find(':') + 1).c_str()) / 1000;
  return 0;
}

volatile double sink = 0;

template <class T>
void report(double ghz, int repeats) {
  constexpr bool kFloat = sizeof(T) == 4;
  constexpr int L = kFloat ? 8 : 4;
  constexpr std::uint32_t stride = 2 * rng::kGammaMaxAttempts;
  const index_t n = index_t(1) << 20;
  const rng::StreamAddress a{rng::philox_key(3), 0, 0, rng::kStreamUserFirst};
  std::vector<T> out(static_cast<size_t>(n));
  const char* name = kFloat ? "float32" : "float64";
  for (double shape : {0.5, 2.5, 10.0}) {
    const double t_fill = median_seconds([&] {
      simd::fill_gammas<T>(a, 0, n, T(shape), out.data());
      sink = sink + double(out[0]);
    }, repeats);
    // attempt 0's blocks of every variate, Philox alone
    const simd::U32x8 lane = kFloat ? simd::U32x8{0, 1, 2, 3, 4, 5, 6, 7} : simd::U32x8{0, 0, 0, 0, 1, 1, 1, 1};
    const simd::U32x8 step = kFloat ? simd::U32x8{0, 1, 2, 3, 4, 5, 6, 7} : simd::U32x8{0, 1, 2, 3, 0, 1, 2, 3};
    const double t_philox = median_seconds([&] {
      simd::U32x8 acc{};
      for (index_t s0 = 0; s0 < n; s0 += L) {
        simd::U32x8 w[4];
        simd::philox_lanes(a, (step + std::uint32_t(s0)) * stride + lane, simd::U32x8{} + a.prompt, w);
        acc ^= w[0] ^ w[1] ^ w[2] ^ w[3];
      }
      sink = sink + double(acc[0]);
    }, repeats);
    // retry statistics: vectors of L consecutive variates, the attempts each lane needs
    std::uint64_t vectors_retry = 0, attempts = 0;
    for (index_t s0 = 0; s0 < n; s0 += L) {
      int most = 0;
      for (int l = 0; l < L; ++l) {
        const double al = shape < 1 ? shape + 1 : shape;
        const double dd = al - 1.0 / 3, c = 1 / std::sqrt(9 * dd);
        int t = 0;
        for (; t < int(rng::kGammaMaxAttempts); ++t) {  // the scalar recipe's acceptance, in double
          std::uint32_t w[4];
          rng::stream_block(a, std::uint32_t(s0 + l) * stride + 2 * t, w);
          double z, z1, u;
          if (kFloat) {
            rng::box_muller<double>(rng::uniform_float<double>(w[0]), rng::uniform_float<double>(w[1]), z, z1);
            u = rng::uniform_float<double>(w[2]);
          } else {
            rng::box_muller<double>(rng::uniform_double<double>(w[0], w[1]), rng::uniform_double<double>(w[2], w[3]),
                                    z, z1);
            std::uint32_t w2[4];
            rng::stream_block(a, std::uint32_t(s0 + l) * stride + 2 * t + 1, w2);
            u = rng::uniform_double<double>(w2[0], w2[1]);
          }
          const double v = (1 + c * z) * (1 + c * z) * (1 + c * z);
          if (1 + c * z > 0 && std::log(u) < 0.5 * z * z + dd - dd * v + dd * std::log(v)) break;
        }
        attempts += std::uint64_t(t + 1);
        most = std::max(most, t);
      }
      vectors_retry += most > 0;
    }
    const auto ns = [n](double t) { return 1e9 * t / double(n); };
    std::printf("%s gamma(%4.1f) | fill_gammas %6.2f ns %6.1f cyc | philox(attempt 0) %5.2f ns %5.1f cyc | "
                "attempts/variate %.4f | vectors with a 2nd attempt %.3f\n",
                name, shape, ns(t_fill), ghz * ns(t_fill), ns(t_philox), ghz * ns(t_philox),
                double(attempts) / double(n), double(vectors_retry) / double(n / L));
  }
  for (auto dN : {std::pair<index_t, index_t>{5, 20}, std::pair<index_t, index_t>{20, 100}}) {
    const index_t d = dN.first, N = dN.second, dp = d + 1, B = 4096;
    std::vector<T> chi2(size_t(8 * dp));
    const double t = median_seconds([&] {
      for (index_t b = 0; b < B; b += 8) {
        rng::StreamAddress ab = a;
        ab.prompt = std::uint32_t(b);
        simd::fill_bartlett_chi2(ab, N, dp, 8, chi2.data());
        sink = sink + double(chi2[0]);
      }
    }, repeats);
    std::printf("%s bartlett chi2 d=%ld N=%ld | %6.1f ns/prompt (%ld chi2) %6.2f ns %6.1f cyc per chi2\n", name,
                long(d), long(N), 1e9 * t / B, long(dp), 1e9 * t / double(B * dp), ghz * 1e9 * t / double(B * dp));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::atof(argv[1]) : ghz_from_cpuinfo();
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 9;
  std::printf("cycles at %.3f GHz, %d repeats\n", ghz, repeats);
  report<float>(ghz, repeats);
  report<double>(ghz, repeats);
}
