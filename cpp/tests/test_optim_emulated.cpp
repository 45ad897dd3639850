// The CUDA optimizer-step kernel (cuda/optim_kernels.cuh) run on the CPU by the execution-model
// emulator: θ, the state and the status record equal the CPU backend's bit for bit (the same
// recipe, the same norm summation order) for every rule, with and without clipping, float and
// double gradients, sizes below, at and above the block, a non-finite gradient, a huge one.
#include "cuda_emulation.hpp"  // first: defines the CUDA keywords the kernels use

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cuda/optim_kernels.cuh"
#include "lsa_native/optim.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::OptimizerState;
using lsa_native::OptimizerStep;
namespace optim = lsa_native::optim;

struct Buffers {
  std::vector<double> theta, out, m, v, vmax, buf, status, rates;
  double loss = 0.5;
  bool with_loss = false;
  explicit Buffers(const std::vector<double>& theta0)
      : theta(theta0), out(theta0.size()), m(theta0.size()), v(theta0.size()),
        vmax(theta0.size()), buf(theta0.size()), status{0.0, 0.0, -1.0} {}
  OptimizerState state() {
    OptimizerState s;
    s.exp_avg = m.data();
    s.exp_avg_sq = v.data();
    s.max_exp_avg_sq = vmax.data();
    s.momentum_buffer = buf.data();
    s.rates = rates.empty() ? nullptr : rates.data();
    s.loss = with_loss ? &loss : nullptr;
    return s;
  }
};

// What a case adds: rate factors (every third entry not a parameter, held at 0; the others at
// factors 1 and 0.1, a parameter group at a tenth of the rate) and/or the step's loss (non-finite
// at step 3).
struct Extras {
  bool rated = false, bad_loss = false;
};

OptimizerStep make_step(int rule, double clip, int t) {
  OptimizerStep s;
  s.rule = rule;
  s.lr = 0.05;
  s.weight_decay = 0.01;
  s.decoupled_decay = 1 - 0.05 * 0.01;
  s.momentum = rule == optim::kSgd ? 0.9 : 0.0;
  s.one_minus_dampening = 1;
  s.nesterov = 1;
  s.first = t == 1;
  s.beta1 = 0.9;
  s.one_minus_beta1 = 1 - 0.9;
  s.beta2 = 0.999;
  s.one_minus_beta2 = 1 - 0.999;
  s.eps = 1e-8;
  s.amsgrad = rule == optim::kAdamW;
  s.bias1 = 1 - std::pow(0.9, t);
  s.bias2 = 1 - std::pow(0.999, t);
  s.clip_norm = clip;
  s.step_index = t - 1;
  return s;
}

template <class T>
void expect_kernel_matches_cpu(int rule, double clip, index_t n, double scale, bool poison,
                               Extras extras = {}) {
  std::mt19937_64 gen(1234 + n);
  std::normal_distribution<double> normal;
  std::vector<double> theta0(n), rates(n, 1.0);
  for (auto& x : theta0) x = normal(gen);
  if (extras.rated)
    for (index_t i = 0; i < n; ++i) {
      if (i % 3 == 0) rates[i] = theta0[i] = 0.0;
      if (i % 3 == 2) rates[i] = 0.1;
    }
  Buffers cpu(theta0), emu(theta0);
  for (Buffers* b : {&cpu, &emu}) {
    if (extras.rated) b->rates = rates;
    b->with_loss = extras.bad_loss;
  }
  std::vector<T> model_cpu(n), model_emu(n);
  for (int t = 1; t <= 4; ++t) {
    std::vector<T> grad(n);
    for (auto& g : grad) g = static_cast<T>(scale * normal(gen));
    if (poison && t == 3) grad[n / 2] = std::numeric_limits<T>::quiet_NaN();
    if (extras.bad_loss && t == 3) cpu.loss = emu.loss = std::numeric_limits<double>::infinity();
    const OptimizerStep s = make_step(rule, clip, t);
    lsa_native::optimizer_step<T>(s, n, cpu.theta.data(), cpu.out.data(), grad.data(), cpu.state(),
                                  -1.0, cpu.status.data(), model_cpu.data(),
                                  lsa_native::Device::cpu);
    lsa_emu::launch(1u, unsigned(optim::kNormLanes), 0,
                    lsa_native::cuda::kernels::optimizer_step_kernel<T>, s, n,
                    static_cast<const double*>(emu.theta.data()), emu.out.data(),
                    static_cast<const T*>(grad.data()), emu.state(), -1.0, emu.status.data(),
                    model_emu.data());
    EXPECT_EQ(emu.out, cpu.out) << "step " << t;
    EXPECT_EQ(model_emu, model_cpu);
    EXPECT_EQ(emu.m, cpu.m);
    EXPECT_EQ(emu.v, cpu.v);
    EXPECT_EQ(emu.vmax, cpu.vmax);
    EXPECT_EQ(emu.buf, cpu.buf);
    for (int i = 0; i < 3; ++i)  // NaN norms compare equal here
      EXPECT_TRUE(emu.status[i] == cpu.status[i] ||
                  (std::isnan(emu.status[i]) && std::isnan(cpu.status[i])));
    if (extras.rated) {
      for (index_t i = 0; i < n; i += 3) EXPECT_EQ(cpu.out[i], 0.0) << "fixed entry " << i;
    }
    cpu.theta.swap(cpu.out);
    emu.theta.swap(emu.out);
  }
  if (extras.bad_loss) {
    EXPECT_EQ(cpu.status[optim::kStatusCode], optim::kBadLoss);
    EXPECT_EQ(cpu.status[optim::kStatusStep], 2.0);
  } else if (poison) {
    EXPECT_EQ(cpu.status[optim::kStatusCode], optim::kBadGradient);
    EXPECT_EQ(cpu.status[optim::kStatusStep], 2.0);
  } else {
    EXPECT_EQ(cpu.status[optim::kStatusCode], optim::kOk);
  }
}

TEST(OptimEmulated, KernelMatchesCpuBitwise) {
  for (int rule : {optim::kSgd, optim::kAdam, optim::kAdamW})
    for (double clip : {0.0, 0.7})
      for (index_t n : {1, 300}) {  // one lane's share, and lanes with 1 or 2
        expect_kernel_matches_cpu<double>(rule, clip, n, 1.0, false);
        expect_kernel_matches_cpu<float>(rule, clip, n, 1.0, false);
      }
}

TEST(OptimEmulated, NonFiniteGradientIsRecordedAndFreezesTheRun) {
  expect_kernel_matches_cpu<double>(optim::kAdam, 0.0, 300, 1.0, true);
  expect_kernel_matches_cpu<float>(optim::kSgd, 1.0, 33, 1.0, true);
}

TEST(OptimEmulated, HugeFiniteGradientGetsTheRescaledNorm) {
  expect_kernel_matches_cpu<double>(optim::kAdam, 1.0, 300, 1e300, false);
}

}  // namespace

TEST(OptimEmulated, RatedEntriesMatchCpuAndZeroRatesStay) {
  for (int rule : {optim::kSgd, optim::kAdam, optim::kAdamW})
    for (double clip : {0.0, 0.7}) {
      expect_kernel_matches_cpu<double>(rule, clip, 300, 1.0, false, {true, false});
      expect_kernel_matches_cpu<float>(rule, clip, 31, 1.0, false, {true, false});
    }
}

TEST(OptimEmulated, NonFiniteLossIsRecordedAndFreezesTheRun) {
  expect_kernel_matches_cpu<double>(optim::kAdam, 0.7, 300, 1.0, false, {false, true});
  expect_kernel_matches_cpu<float>(optim::kSgd, 0.0, 33, 1.0, false, {true, true});
}
