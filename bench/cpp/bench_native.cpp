// Native benchmarks (Google Benchmark) of the LSA kernels at the SPEC section 5 sizes, with the
// streaming-read roofline measured in the same run. Build with -DLSA_NATIVE_BUILD_BENCHMARKS=ON:
//   ./build/bench/cpp/lsa_native_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "lsa_native/bench.hpp"
#include "lsa_native/kernel_attention.hpp"
#include "lsa_native/lsa.hpp"
#include "lsa_native/population.hpp"

namespace {

using lsa_native::index_t;

template <class T>
struct Inputs {
  lsa_native::LsaShape shape;
  std::vector<T> E, y_q, W_pv, W_kq, out, g_pv, g_kq;
  explicit Inputs(const benchmark::State& state)
      : shape{state.range(0), state.range(1), state.range(2)} {
    const index_t B = shape.batch, rows = shape.dim + 1, cols = shape.context + 1;
    std::mt19937 gen(0);
    std::normal_distribution<T> normal;
    E.resize(B * rows * cols);
    for (auto& v : E) v = normal(gen);
    y_q.assign(B, T(0));
    W_pv.resize(rows * rows);
    W_kq.resize(rows * rows);
    for (auto& v : W_pv) v = normal(gen);
    for (auto& v : W_kq) v = normal(gen);
    out.resize(B);
    g_pv.resize(rows * rows);
    g_kq.resize(rows * rows);
  }
  void count(benchmark::State& state) const {
    state.SetItemsProcessed(state.iterations() * shape.batch);  // prompts/s
    state.SetBytesProcessed(state.iterations() * index_t(E.size() * sizeof(T)));  // input bytes/s
  }
};

template <class T>
void BM_stream_read(benchmark::State& state) {
  Inputs<T> in(state);
  for (auto _ : state) benchmark::DoNotOptimize(lsa_native::stream_sum(in.E.data(), index_t(in.E.size())));
  in.count(state);
}

template <class T>
void BM_lsa_predict(benchmark::State& state) {
  Inputs<T> in(state);
  for (auto _ : state) {
    lsa_native::lsa_predict(in.shape, in.E.data(), in.W_pv.data(), in.W_kq.data(), in.out.data());
    benchmark::ClobberMemory();
  }
  in.count(state);
}

template <class T>
void BM_lsa_loss_and_grad(benchmark::State& state) {
  Inputs<T> in(state);
  for (auto _ : state) {
    benchmark::DoNotOptimize(lsa_native::lsa_loss_and_grad(in.shape, in.E.data(), in.y_q.data(),
                                                           in.W_pv.data(), in.W_kq.data(),
                                                           in.g_pv.data(), in.g_kq.data()));
  }
  in.count(state);
}

template <class T>
void BM_lsa_forward(benchmark::State& state) {
  Inputs<T> in(state);
  std::vector<T> F(in.E.size());
  for (auto _ : state) {
    lsa_native::lsa_forward(in.shape, in.E.data(), in.W_pv.data(), in.W_kq.data(), F.data());
    benchmark::ClobberMemory();
  }
  in.count(state);
}

// {B, d, N}: the SPEC section 5 sizes.
#define LSA_SIZES ->Args({65536, 20, 100})->Args({262144, 5, 30})->Unit(benchmark::kMillisecond)->UseRealTime()
BENCHMARK_TEMPLATE(BM_stream_read, float) LSA_SIZES;
BENCHMARK_TEMPLATE(BM_stream_read, double) LSA_SIZES;
BENCHMARK_TEMPLATE(BM_lsa_predict, float) LSA_SIZES;
BENCHMARK_TEMPLATE(BM_lsa_predict, double) LSA_SIZES;
BENCHMARK_TEMPLATE(BM_lsa_loss_and_grad, float) LSA_SIZES;
BENCHMARK_TEMPLATE(BM_lsa_loss_and_grad, double) LSA_SIZES;
BENCHMARK_TEMPLATE(BM_lsa_forward, float) LSA_SIZES;
BENCHMARK_TEMPLATE(BM_lsa_forward, double) LSA_SIZES;

// Exact population loss and gradient at d = state.range(0), N = 20.
void BM_population_loss_and_grad(benchmark::State& state) {
  const index_t d = state.range(0), n = (d + 1) * (d + 1);
  std::mt19937 gen(0);
  std::normal_distribution<double> normal;
  std::vector<double> W_pv(n), W_kq(n), g_pv(n), g_kq(n), Lambda(d * d, 0.0);
  for (auto& v : W_pv) v = 0.3 * normal(gen);
  for (auto& v : W_kq) v = 0.3 * normal(gen);
  for (index_t i = 0; i < d; ++i) Lambda[i * d + i] = 0.5 + 1.5 * double(i) / double(d);
  for (auto _ : state)
    benchmark::DoNotOptimize(lsa_native::population_loss(d, W_pv.data(), W_kq.data(),
                                                         Lambda.data(), 20, g_pv.data(), g_kq.data()));
}
BENCHMARK(BM_population_loss_and_grad)->Arg(5)->Arg(20)->Arg(100)->Unit(benchmark::kMicrosecond);

// Kernel attention at CCS's minibatch: d = 5, n = 30, L = 3, B = 30000, float32, one head;
// state.range(0) is the activation code (0 linear, 1 relu, 2 exp, 3 softmax).
void BM_kernel_attention_loss_and_grad(benchmark::State& state) {
  const lsa_native::KernelAttentionShape s{30000, 5, 30, 3, 1};
  const auto act = static_cast<lsa_native::Activation>(state.range(0));
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  std::vector<float> Z(s.batch * 6 * 31), y(s.batch), V(3 * 36), Bq(3 * 25), Ck(3 * 25);
  for (auto& v : Z) v = 0.4f * normal(gen);
  for (auto& v : V) v = 0.01f * normal(gen);
  for (auto& v : Bq) v = 0.2f * normal(gen);
  for (auto& v : Ck) v = 0.2f * normal(gen);
  std::vector<float> dV(V.size()), dB(Bq.size()), dC(Ck.size());
  for (auto _ : state)
    benchmark::DoNotOptimize(lsa_native::kernel_attention_loss_and_grad(
        s, Z.data(), y.data(), V.data(), Bq.data(), Ck.data(), &act, dV.data(), dB.data(),
        dC.data(), static_cast<float*>(nullptr), static_cast<float*>(nullptr)));
  state.SetItemsProcessed(state.iterations() * s.batch);
}
BENCHMARK(BM_kernel_attention_loss_and_grad)->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
