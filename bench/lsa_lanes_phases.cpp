// Where the time of the prompts-in-lanes LSA kernels goes (cpu/lsa_kernels.inl, d <= 8), per
// prompt, against a read of E on the same core: a scratch profile, not part of the build.
//
//   g++ -std=c++17 -O3 -mavx2 -mfma -Icpp/src -Icpp/include -Ibuild/pydev/generated
//       bench/lsa_lanes_phases.cpp -o /tmp/lsa_lanes_phases && nice /tmp/lsa_lanes_phases [reps]
//
// (build/pydev/generated: any configured build's generated headers.) Cumulative phases on one
// thread, interleaved, each a min and a median over `reps` calls on a batch beyond L2 (d = 5,
// N = 20, B = 4096: E = 2 MB in float32): "read" = an AVX2 streaming sum over E (4 accumulators,
// what the core's loads reach), "stage" = the transposes of the groups into X (the lanes layout),
// "+ forward" = stage and pass<false> (q, t, s, Σ t s: predict's math), "+ fwd+bwd" = stage and
// backward_pass() instead (ŷ, G p and G q: all the per-prompt math of the loss gradient),
// "loss_grad" = the whole kernel (adds the residuals and the batch sums of the gradients in double
// lanes). The kernel itself is timed from its own copy of the .inl (namespace
// isa_whole) so that the phase calls do not change how the compiler inlines it.
#define LSA_ISA_NS isa_whole
#include "cpu/lsa_kernels.inl"
#undef LSA_ISA_NS
#define LSA_ISA_NS isa_parts
#include "cpu/lsa_kernels.inl"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

using namespace lsa_native;
using namespace lsa_native::cpu;

template <class T>
void profile(index_t d, index_t N, index_t B, int reps) {
  constexpr index_t L = simd::kLanes<T>;
  const index_t values = (d + 1) * (N + 1);
  std::vector<T> E(static_cast<size_t>(B * values)), y(static_cast<size_t>(B));
  std::vector<T> Wp(static_cast<size_t>((d + 1) * (d + 1))), Wk(Wp.size());
  std::mt19937 g(1);
  std::normal_distribution<double> n;
  for (auto* v : {&E, &y, &Wp, &Wk})
    for (auto& x : *v) x = T(n(g) / (v == &Wp || v == &Wk ? d + 1 : 1));
  LsaShape sh{};
  sh.dim = d;
  sh.context = N;
  sh.batch = B;
  std::vector<double> partial(static_cast<size_t>(loss_grad_partial_size(d)));
  volatile double sink = 0;
  auto read = [&] {
    simd::Vec<T> a{}, b{}, c{}, e{};
    for (index_t i = 0; i + 4 * L <= B * values; i += 4 * L) {
      a += simd::load(E.data() + i);
      b += simd::load(E.data() + i + L);
      c += simd::load(E.data() + i + 2 * L);
      e += simd::load(E.data() + i + 3 * L);
    }
    sink = simd::hsum((a + b) + (c + e));
  };
  auto groups = [&](int phase) {
    isa_parts::LanePrompts<T> w(d, N, Wp.data(), Wk.data());
    simd::Vec<T> acc{};
    isa_parts::for_each_lane_group(w, E.data(), 0, B, [&](index_t, index_t) {
      if (phase == 0) acc += w.X[0];
      else if (phase == 1) acc += w.template pass<false>();
      else acc += w.backward_pass();
    });
    sink = simd::hsum(acc);
  };
  const auto whole = isa_whole::lsa_kernels<T>();
  const char* names[] = {"read", "stage", "+ forward", "+ fwd+bwd", "loss_grad"};
  std::vector<double> t[5];
  for (int r = 0; r < reps; ++r)
    for (int v = 0; v < 5; ++v) {
      const auto t0 = std::chrono::steady_clock::now();
      if (v == 0) read();
      else if (v < 4) groups(v - 1);
      else whole.loss_grad(sh, E.data(), y.data(), Wp.data(), Wk.data(), nullptr, 0, B, partial.data());
      t[v].push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / B);
    }
  std::printf("%s d = %ld, N = %ld, B = %ld (E %.2f MB), ns per prompt (min / median of %d):\n",
              sizeof(T) == 4 ? "float32" : "float64", long(d), long(N), long(B),
              double(E.size() * sizeof(T)) / 1e6, reps);
  for (int v = 0; v < 5; ++v) {
    std::sort(t[v].begin(), t[v].end());
    std::printf("  %-11s %6.1f / %6.1f\n", names[v], t[v][0], t[v][size_t(reps / 2)]);
  }
  std::printf("  70%% of the read: %.1f ns per prompt\n", t[0][0] / 0.7);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 401;
  profile<float>(5, 20, 4096, reps);
  profile<double>(5, 20, 4096, reps);
}
