// Where the CPU Wishart step's time goes (issue 22): the whole step over B prompts (the table's
// wishart_loss_grad of this translation unit) next to its parts run alone on the same sizes: the
// normals (fill_normals_lanes, 8 prompts per call), the Bartlett χ² (fill_bartlett_chi2), and the
// scalar per-prompt recipe (wishart::prompt_residual + accumulate on fixed draws: the route before
// the prompts-in-lanes step, for reference). Medians of CPU-seconds of this process on 1 thread, so
// a loaded machine disturbs it little. The step is compiled here from cpu/sampling_kernels.inl in
// a namespace of its own with the flags given, e.g. the AVX2 table's (BUILD: a configured build
// directory, for lsa_native/config.hpp):
//   g++ -O3 -std=c++17 -mavx2 -mfma -fschedule-insns -fsched-pressure -DNDEBUG -Icpp/src -Icpp/include -IBUILD/generated
//       bench/cpp/wishart_step_parts.cpp -o /tmp/wishart_step_parts && /tmp/wishart_step_parts
#define LSA_ISA_NS isa_bench_parts
#include "cpu/sampling_kernels.inl"
#include "part_timing.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace {

using lsa_native::index_t;
namespace cpu = lsa_native::cpu;
namespace simd = lsa_native::cpu::simd;
namespace rng = lsa_native::rng;
namespace wishart = lsa_native::wishart;

using lsa_native::bench::median_seconds;

template <class T>
void report(index_t d, index_t N, index_t B, T sigma) {
  lsa_native::linear::Law<T> P;
  P.d = d;
  P.N = N;
  P.key = rng::philox_key(1);
  P.step = 3;
  P.sigma = sigma;
  const index_t dp = wishart::noise_dim(P), nz = wishart::bartlett_normals_used(P), rows = d + 1;
  std::vector<T> W_pv(size_t(rows * rows), T(0.01)), W_kq(size_t(rows * rows), T(0.02));
  std::vector<double> partial(size_t(cpu::loss_grad_partial_size(d)));
  std::vector<T> chi2(size_t(8 * dp));
  simd::VecBuffer<T> lane_buffer(2 * nz);
  simd::Vec<T>* lanes = lane_buffer.data();
  const int repeats = 31;
  volatile double sink = 0;
  const auto kernels = cpu::isa_bench_parts::sampling_kernels<T>();
  const double t_step = median_seconds([&] {
    kernels.wishart_loss_grad(P, W_pv.data(), W_kq.data(), 0, B, partial.data());
    sink = sink + partial[0];
  }, repeats);
  const double t_normals = median_seconds([&] {
    for (index_t b = 0; b < B; b += 8) {
      simd::fill_normals_lanes<T>(P.address(b, rng::kStreamBartlettNormal), nz, lanes);
      sink = sink + double(lanes[0][0]);
    }
  }, repeats);
  const double t_chi2 = median_seconds([&] {
    for (index_t b = 0; b < B; b += 8) {
      simd::fill_bartlett_chi2(P.address(b, rng::kStreamBartlettChi2), N, dp, std::min<index_t>(8, B - b),
                               chi2.data());
      sink = sink + double(chi2[0]);
    }
  }, repeats);
  std::vector<T> z(size_t(nz), T(0.3)), c(size_t(dp), static_cast<T>(N)), w(size_t(d), T(0.5));
  std::vector<T> work(size_t(wishart::Work<T>::size(d, dp)));
  const auto s = wishart::Work<T>::at(work.data(), d, dp);
  std::vector<double> acc(partial.size());
  const double t_scalar = median_seconds([&] {
    for (index_t b = 0; b < B; ++b) {
      z[0] = T(b & 7);
      const double r = wishart::prompt_residual(P, W_kq.data(), W_pv.data() + d * rows, z.data(), c.data(),
                                                w.data(), static_cast<const T*>(nullptr), s);
      wishart::accumulate(r, s, rows, acc.data());
    }
    sink = sink + acc[0];
  }, repeats);
  const auto ns = [B](double t) { return 1e9 * t / double(B); };
  std::printf("%-7s d=%-3ld N=%-4ld B=%-5ld sigma=%-4g | step %7.3f ms (%5.0f ns/prompt) | normals %5.0f "
              "ns/prompt (%ld) | chi2 %5.0f ns/prompt (%ld) | scalar per-prompt recipe %5.0f ns/prompt\n",
              sizeof(T) == 4 ? "float32" : "float64", long(d), long(N), long(B), double(sigma), 1e3 * t_step,
              ns(t_step), ns(t_normals), long(nz), ns(t_chi2), long(dp), ns(t_scalar));
}

}  // namespace

int main() {
  report<float>(5, 20, 4096, 0.0f);
  report<double>(5, 20, 4096, 0.0);
  report<float>(5, 20, 4096, 0.5f);
  report<float>(20, 100, 1024, 0.0f);
  report<double>(20, 100, 1024, 0.0);
}
