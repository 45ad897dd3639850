// Where the CPU tokens step's time goes (issue 22): the fused step over B prompts (the library's
// linear_prompts_lsa_loss_and_grad, method tokens, on 1 thread) next to its parts run alone on the
// same sizes: Philox words (8 counters per call, and the fills' kFillGroups groups of 8 interleaved:
// 2, or 4 with AVX-512's philox_wide), the uniform -> normal transform (Box–Muller on words varied
// per call), one prompt's normals (fill_normals of its covariate range, and fill_normals_packed over
// 8 prompts), the prompt written into E (draw_prompt on CovariateNormals: normals and the writes),
// and the library's LSA loss_grad on 8 written prompts. Minima of CPU-seconds of this process on 1
// thread (a loaded machine disturbs it little), as ns and as cycles at the TSC rate (the core clock
// may differ under boost).
// The sampling parts are compiled here from cpu/sampling_kernels.inl in a namespace of its own with
// the flags given, e.g. the AVX2 table's (CMakeLists.txt: -mavx2 -mfma and, with GCC,
// LSA_NATIVE_SAMPLING_SCHED_OPTIONS); the step and the LSA kernel come from liblsa_native.a
// (the table this CPU selects, or LSA_NATIVE_CPU_ISA's). BUILD: a configured build directory:
//   g++ -O3 -std=c++17 -mavx2 -mfma -fschedule-insns -fsched-pressure -DNDEBUG -DLSA_NATIVE_X86_DISPATCH
//       -Icpp/src -Icpp/include -IBUILD/generated
//       bench/cpp/tokens_step_parts.cpp BUILD/liblsa_native.a -lpthread -o /tmp/tokens_step_parts
#define LSA_ISA_NS isa_bench_tokens
#include "cpu/sampling_kernels.inl"

#include <x86intrin.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "cpu/sampling_cpu.hpp"
#include "lsa_native/device.hpp"
#include "part_timing.hpp"

namespace {

using lsa_native::index_t;
namespace cpu = lsa_native::cpu;
namespace simd = lsa_native::cpu::simd;
namespace rng = lsa_native::rng;
using lsa_native::cpu::isa_bench_tokens::PromptDraws;
using lsa_native::cpu::isa_bench_tokens::TaskPool;
using lsa_native::cpu::isa_bench_tokens::draw_prompt;
using lsa_native::cpu::isa_bench_tokens::CovariateNormals;

using lsa_native::bench::min_seconds;

double wall_seconds() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// TSC ticks per ns (the TSC counts at a fixed rate, wall time).
double tsc_per_ns() {
  const double t0 = wall_seconds();
  const unsigned long long c0 = __rdtsc();
  while (wall_seconds() - t0 < 0.1) {
  }
  return double(__rdtsc() - c0) / (1e9 * (wall_seconds() - t0));
}

template <class T>
void report(index_t d, index_t N, index_t B, double ghz) {
  lsa_native::linear::Law<T> P;
  P.d = d;
  P.N = N;
  P.key = rng::philox_key(1);
  P.step = 3;
  const index_t rows = d + 1, cols = N + 1, n = P.covariate_normals();
  constexpr index_t per = rng::NormalsPerBlock<T>::value;
  const int repeats = 21;
  volatile double sink = 0;
  const index_t variates = B * n;  // normals per step
  // Philox words: the blocks the step's normals need (per / block), 8·G blocks a call
  const index_t blocks = (n + per - 1) / per;
  const auto philox = [&](auto groups) {
    constexpr int G = decltype(groups)::value;
    return min_seconds([&] {
      simd::U32x8 acc{};
      for (index_t b = 0; b < B; ++b) {
        const rng::StreamAddress a = P.address(b, rng::kStreamX);
        for (index_t k = 0; k < blocks; k += 8 * G) {
          simd::U32x8 w[G][4];
          simd::philox_consecutive_blocks<G>(a, std::uint32_t(k), w);
          for (int g = 0; g < G; ++g) acc ^= w[g][0] ^ w[g][1] ^ w[g][2] ^ w[g][3];
        }
      }
      sink = sink + double(acc[0]);
    }, repeats);
  };
  const double t_philox1 = philox(std::integral_constant<int, 1>{});
  const double t_philox2 = philox(std::integral_constant<int, simd::kFillGroups>{});
  // the transform alone: lane_normals on words varied per call (every word, so nothing is hoisted),
  // every output summed
  std::vector<T> z(size_t(8 * per));
  const double t_transform = min_seconds([&] {
    simd::U32x8 w[4];
    simd::philox_consecutive_blocks<1>(P.address(0, rng::kStreamX), 0, reinterpret_cast<simd::U32x8(&)[1][4]>(w));
    simd::Vec<T> acc{};
    for (index_t b = 0; b < B; ++b) {
      for (index_t k = 0; k < blocks; k += 8) {
        for (int j = 0; j < 4; ++j) w[j] += 0x9E3779B9u * std::uint32_t(2 * j + 1);
        simd::lane_normals(w, z.data());
        for (index_t i = 0; i < 8 * per; i += simd::kLanes<T>) acc += simd::load(z.data() + i);
      }
    }
    sink = sink + double(acc[0]);
  }, repeats);
  std::vector<T> zn(size_t(n) + 64);
  const double t_fill = min_seconds([&] {
    for (index_t b = 0; b < B; ++b) {
      simd::fill_normals(P.address(b, rng::kStreamX), 0, n, zn.data());
      sink = sink + double(zn[0]);
    }
  }, repeats);
  std::vector<T> zp(size_t(simd::packed_normals_size<T>(n, 8)));
  const double t_packed = min_seconds([&] {
    for (index_t b = 0; b < B; b += 8) {
      simd::fill_normals_packed(P.address(b, rng::kStreamX), n, 8, zp.data());
      sink = sink + double(zp[0]);
    }
  }, repeats);
  PromptDraws<T> s(d, N);
  const TaskPool<T> pool(P, B);
  std::vector<T> E(size_t(8 * rows * cols)), y_q(8);
  const double t_prompt = min_seconds([&] {
    CovariateNormals<T> normals(P, 0, B);
    for (index_t b = 0; b < B; ++b) {
      y_q[size_t(b & 7)] = draw_prompt(P, pool, b, normals.at(b), s, E.data() + (b & 7) * rows * cols);
      sink = sink + double(y_q[size_t(b & 7)]);
    }
  }, repeats);
  // the LSA kernel on 8 written prompts, B / 8 calls
  const auto& lsa = LSA_NATIVE_SELECT_KERNELS(cpu::LsaKernels<T>, lsa_kernels<T>());
  std::vector<T> W_pv(size_t(rows * rows), T(0.01)), W_kq(size_t(rows * rows), T(0.02));
  std::vector<double> part(size_t(cpu::loss_grad_partial_size(d)));
  {
    CovariateNormals<T> normals(P, 0, 8);
    for (index_t b = 0; b < 8; ++b) y_q[size_t(b)] = draw_prompt(P, pool, b, normals.at(b), s, E.data() + b * rows * cols);
  }
  const double t_lsa = min_seconds([&] {
    for (index_t b = 0; b < B; b += 8) {
      lsa.loss_grad(lsa_native::LsaShape{8, d, N}, E.data(), y_q.data(), W_pv.data(), W_kq.data(), nullptr,
                    0, 8, part.data());
      sink = sink + part[0];
    }
  }, repeats);
  std::vector<T> dWp(size_t(rows * rows)), dWk(size_t(rows * rows));
  const double t_step = min_seconds([&] {
    sink = sink + cpu::linear_prompts_lsa_loss_and_grad<T>(P, B, lsa_native::FusedMethod::tokens, W_pv.data(),
                                                           W_kq.data(), dWp.data(), dWk.data());
  }, repeats);
  const double nv = double(variates);
  const auto cyc = [&](double t) { return 1e9 * t * ghz / nv; };
  std::printf("%-7s d=%-3ld N=%-4ld B=%-5ld normals/prompt %ld | cycles per normal (TSC): philox %.2f (%d groups %.2f), "
              "transform %.2f, fill_normals %.2f (packed %.2f), prompt written %.2f, LSA kernel %.2f, fused step %.2f "
              "| step %.3f ms = %.0f ns/prompt\n",
              sizeof(T) == 4 ? "float32" : "float64", long(d), long(N), long(B), long(n), cyc(t_philox1),
              simd::kFillGroups, cyc(t_philox2),
              cyc(t_transform), cyc(t_fill), cyc(t_packed), cyc(t_prompt), cyc(t_lsa), cyc(t_step), 1e3 * t_step,
              1e9 * t_step / double(B));
}

}  // namespace

int main() {
  lsa_native::set_num_threads(1);
  const double ghz = tsc_per_ns();
  std::printf("TSC %.3f GHz; LSA table %s\n", ghz, cpu::isa_label(cpu::cpu_isa()));
  report<float>(5, 20, 4096, ghz);
  report<double>(5, 20, 4096, ghz);
  report<float>(20, 100, 1024, ghz);
  report<double>(20, 100, 1024, ghz);
}
