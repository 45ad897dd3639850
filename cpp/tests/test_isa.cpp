// The one ISA mechanism (cpu/isa.hpp): every per-ISA kernel table (LSA, prediction VJP, kernel
// attention, sampling, small matrix) gives the baseline's results to rounding (FMA contraction and
// vector widths differ), so the builds this machine does not pick are exercised too. One test per
// (table, ISA) from the ISA list; an ISA the CPU (or OS) lacks is skipped, and says so. Odd sizes,
// d = 1, N = 1, float and double. The random streams: normals agree with the scalar recipe and with
// the baseline table within the bound stated in kNormalBound.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/random.hpp"
#include "cpu/isa.hpp"
#include "cpu/kernel_attention_kernels.hpp"
#include "cpu/lsa_kernels.hpp"
#include "cpu/lsa_predict_vjp.hpp"
#include "cpu/sampling_kernels.hpp"
#include "cpu/small_matrix_cpu.hpp"
#include "ka_problem.hpp"
#include "lsa_problem.hpp"
#include "random_bounds.hpp"

namespace {

using lsa_native::index_t;
namespace cpu = lsa_native::cpu;
using cpu::Isa;

// max |a − b| / max(1, max |b|).
template <class T>
double relative_gap(const std::vector<T>& a, const std::vector<T>& b) {
  double gap = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return gap / scale;
}

template <class T>
double tolerance() {
  return std::is_same<T, float>::value ? 2e-4 : 1e-11;
}

// Every ISA of the list but the baseline: the tables compared with the baseline's.
#define LSA_TEST_ISA_VALUE(name, label, ...) Isa::name,
const std::vector<Isa> kAllIsas = {LSA_NATIVE_CPU_ISAS(LSA_TEST_ISA_VALUE, ~)};
#undef LSA_TEST_ISA_VALUE

class IsaTables : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu::isa_supported(GetParam()))
      GTEST_SKIP() << "this CPU (or its OS) cannot run the " << cpu::isa_label(GetParam()) << " tables";
  }
};

template <class T>
void check_lsa_tables(Isa isa) {
  // d = 2, 5 at N = 20 with B = 13: the prompts-in-lanes kernels (Gram-first backward) over whole
  // groups and a tail; d = 7 (above): the token pass.
  for (auto [B, d, N] : {std::array<index_t, 3>{3, 1, 1}, {5, 4, 9}, {4, 20, 100}, {2, 7, 33},
                         {13, 2, 20}, {13, 5, 20}}) {
    const auto p = lsa_native::testing::random_lsa_problem<T>(B, d, N, unsigned(B * 100 + d + N));
    const index_t rc = (d + 1) * (N + 1);
    using Vjp = cpu::LsaPredictVjpKernels<T>;
    const Vjp tables[] = {LSA_NATIVE_KERNELS_FOR(Isa::baseline, Vjp, lsa_predict_vjp_kernels<T>()),
                          LSA_NATIVE_KERNELS_FOR(isa, Vjp, lsa_predict_vjp_kernels<T>())};
    std::vector<std::vector<T>> d_E;
    std::vector<std::vector<double>> partial;
    for (const auto& k : tables) {
      d_E.emplace_back(static_cast<size_t>(B * rc), T(NAN));  // poisoned: every entry written
      partial.emplace_back(static_cast<size_t>(cpu::predict_vjp_partial_size(d)), NAN);
      k.range(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), p.y_q.data(), d_E.back().data(), 0,
              B, partial.back().data());
    }
    for (T x : d_E[0]) ASSERT_TRUE(std::isfinite(double(x)));
    EXPECT_LT(relative_gap(d_E[0], d_E[1]), tolerance<T>()) << "d_E, d = " << d << ", N = " << N;
    EXPECT_LT(relative_gap(partial[0], partial[1]), tolerance<T>()) << "d = " << d << ", N = " << N;
    for (const auto& k : tables) {  // without dE (the parameter gradients only)
      partial.emplace_back(static_cast<size_t>(cpu::predict_vjp_partial_size(d)), NAN);
      k.range(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), p.y_q.data(), nullptr, 0, B,
              partial.back().data());
    }
    EXPECT_LT(relative_gap(partial[2], partial[3]), tolerance<T>()) << "no dE, d = " << d;
    EXPECT_LT(relative_gap(partial[0], partial[2]), tolerance<T>()) << "no dE vs dE, d = " << d;

    using Lsa = cpu::LsaKernels<T>;
    const Lsa lsa[] = {LSA_NATIVE_KERNELS_FOR(Isa::baseline, Lsa, lsa_kernels<T>()),
                       LSA_NATIVE_KERNELS_FOR(isa, Lsa, lsa_kernels<T>())};
    std::vector<std::vector<T>> F, y_hat, dE2;
    std::vector<std::vector<double>> lg, vj;
    for (const auto& k : lsa) {
      F.emplace_back(static_cast<size_t>(B * rc), T(NAN));
      k.forward(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), F.back().data(), 0, B);
      y_hat.emplace_back(static_cast<size_t>(B), T(NAN));
      k.predict(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), y_hat.back().data(), 0, B);
      lg.emplace_back(static_cast<size_t>(cpu::loss_grad_partial_size(d)), NAN);
      k.loss_grad(p.shape, p.E.data(), p.y_q.data(), p.W_pv.data(), p.W_kq.data(), nullptr, 0, B,
                  lg.back().data());
      dE2.emplace_back(static_cast<size_t>(B * rc), T(NAN));
      vj.emplace_back(static_cast<size_t>(cpu::vjp_partial_size(d)), NAN);
      k.vjp(p.shape, p.E.data(), p.W_pv.data(), p.W_kq.data(), p.d_F.data(), dE2.back().data(), 0, B,
            vj.back().data());
    }
    EXPECT_LT(relative_gap(F[0], F[1]), tolerance<T>()) << "forward, d = " << d << ", N = " << N;
    EXPECT_LT(relative_gap(y_hat[0], y_hat[1]), tolerance<T>()) << "predict, d = " << d;
    EXPECT_LT(relative_gap(lg[0], lg[1]), tolerance<T>()) << "loss_grad, d = " << d << ", N = " << N;
    EXPECT_LT(relative_gap(dE2[0], dE2[1]), tolerance<T>()) << "vjp d_E, d = " << d << ", N = " << N;
    EXPECT_LT(relative_gap(vj[0], vj[1]), tolerance<T>()) << "vjp partial, d = " << d << ", N = " << N;
  }
}

TEST_P(IsaTables, LsaKernelsAgreeWithBaseline) {
  check_lsa_tables<float>(GetParam());
  check_lsa_tables<double>(GetParam());
}

template <class T>
void check_ka_tables(Isa isa) {
  using lsa_native::Activation;
  using lsa_native::KernelAttentionShape;
  // batch 21: whole groups of prompts in the vector lanes (loss_grad) and a remainder.
  const KernelAttentionShape shapes[] = {{3, 1, 1, 1, 1}, {4, 3, 7, 2, 2}, {2, 5, 30, 3, 1}, {21, 3, 7, 2, 2}};
#define LSA_TEST_ACTIVATION(name, column_wise) Activation::name,
  const Activation acts_all[] = {LSA_NATIVE_ACTIVATIONS(LSA_TEST_ACTIVATION)};
#undef LSA_TEST_ACTIVATION
  using Ka = cpu::KaKernels<T>;
  const Ka tables[] = {LSA_NATIVE_KERNELS_FOR(Isa::baseline, Ka, ka_kernels<T>()),
                       LSA_NATIVE_KERNELS_FOR(isa, Ka, ka_kernels<T>())};
  for (const auto& s : shapes) {
    for (Activation act : acts_all) {
      const auto p = lsa_native::testing::random_ka_problem<T>(
          s, std::vector<Activation>(static_cast<size_t>(s.heads), act), unsigned(s.dim * 7 + s.context));
      const index_t nz = s.batch * (s.dim + 1) * (s.context + 1);
      std::vector<T> Z[2], pred[2], dZ[2], dZv[2], dZp[2];
      std::vector<double> part[2], part_v[2], part_p[2];
      for (int t = 0; t < 2; ++t) {
        Z[t].assign(static_cast<size_t>(nz), T(NAN));
        pred[t].assign(static_cast<size_t>(s.batch * (s.layers + 1)), T(NAN));
        tables[t].forward(s, p.Z0.data(), p.V.data(), p.Bq.data(), p.Ck.data(), p.acts.data(),
                          Z[t].data(), pred[t].data(), nullptr, lsa_native::PredictionOutput::tf, 0,
                          s.batch);
        dZ[t].assign(static_cast<size_t>(nz), T(NAN));
        part[t].assign(static_cast<size_t>(cpu::ka_partial_size(s)), NAN);
        tables[t].loss_grad(s, p.Z0.data(), p.y_q.data(), lsa_native::recipe::QuerySeed::labels,
                            p.V.data(), p.Bq.data(), p.Ck.data(), p.acts.data(), dZ[t].data(),
                            nullptr, 0, s.batch, part[t].data());
        // predict_vjp's seed (−y_q read as ∂ℓ/∂ŷ)
        dZp[t].assign(static_cast<size_t>(nz), T(NAN));
        part_p[t].assign(part[t].size(), NAN);
        tables[t].loss_grad(s, p.Z0.data(), p.y_q.data(),
                            lsa_native::recipe::QuerySeed::prediction_gradient, p.V.data(),
                            p.Bq.data(), p.Ck.data(), p.acts.data(), dZp[t].data(), nullptr, 0,
                            s.batch, part_p[t].data());
        dZv[t].assign(static_cast<size_t>(nz), T(NAN));
        part_v[t].assign(part[t].size(), NAN);
        tables[t].vjp(s, p.Z0.data(), p.V.data(), p.Bq.data(), p.Ck.data(), p.acts.data(),
                      p.d_Z.data(), dZv[t].data(), nullptr, 0, s.batch, part_v[t].data());
      }
      const std::string where = "activation " + std::to_string(int(act)) + ", d = " +
                                std::to_string(s.dim) + ", n = " + std::to_string(s.context);
      for (T x : dZ[0]) ASSERT_TRUE(std::isfinite(double(x))) << where;
      EXPECT_LT(relative_gap(Z[0], Z[1]), tolerance<T>()) << "forward, " << where;
      EXPECT_LT(relative_gap(pred[0], pred[1]), tolerance<T>()) << "predictions, " << where;
      EXPECT_LT(relative_gap(dZ[0], dZ[1]), tolerance<T>()) << "loss_grad d_Z0, " << where;
      EXPECT_LT(relative_gap(part[0], part[1]), tolerance<T>()) << "loss_grad partial, " << where;
      EXPECT_LT(relative_gap(dZp[0], dZp[1]), tolerance<T>()) << "predict_vjp d_Z0, " << where;
      EXPECT_LT(relative_gap(part_p[0], part_p[1]), tolerance<T>()) << "predict_vjp partial, " << where;
      EXPECT_EQ(part_p[0][0], 0.0) << "predict_vjp keeps no loss, " << where;
      EXPECT_LT(relative_gap(dZv[0], dZv[1]), tolerance<T>()) << "vjp d_Z0, " << where;
      EXPECT_LT(relative_gap(part_v[0], part_v[1]), tolerance<T>()) << "vjp partial, " << where;
    }
  }
}

TEST_P(IsaTables, KernelAttentionKernelsAgreeWithBaseline) {
  check_ka_tables<float>(GetParam());
  check_ka_tables<double>(GetParam());
}

// Normals across tables: within kNormalBound (random_bounds.hpp) of the scalar recipe and the
// baseline table; the uniforms behind them: the same bits.
using lsa_native::test::kNormalBound;

template <class T>
void check_normals(Isa isa) {
  using Sampling = cpu::SamplingKernels<T>;
  const Sampling tables[] = {LSA_NATIVE_KERNELS_FOR(Isa::baseline, Sampling, sampling_kernels<T>()),
                             LSA_NATIVE_KERNELS_FOR(isa, Sampling, sampling_kernels<T>())};
  const lsa_native::rng::StreamAddress a{lsa_native::rng::philox_key(20261126), 7, 3, 1};
  for (auto [start, n] : {std::array<index_t, 2>{0, 1}, {5, 77}, {3, 4099}, {1000001, 333}}) {
    std::vector<T> z[2];
    for (int t = 0; t < 2; ++t) {
      z[t].assign(static_cast<size_t>(n), T(NAN));
      tables[t].normals(a, std::uint64_t(start), n, z[t].data());
    }
    std::vector<T> u(static_cast<size_t>(n), T(NAN));
    tables[1].uniforms(a, std::uint64_t(start), n, u.data());
    for (index_t i = 0; i < n; ++i) {  // the uniforms: the scalar recipe's bits
      ASSERT_EQ(u[size_t(i)], lsa_native::rng::uniform_at<T>(a, std::uint64_t(start + i))) << start + i;
    }
    for (index_t i = 0; i < n; ++i) {
      const double exact = double(lsa_native::rng::normal_at<T>(a, std::uint64_t(start + i)));
      const double bound = kNormalBound<T> * std::max(1.0, std::fabs(exact));
      ASSERT_NEAR(double(z[1][size_t(i)]), exact, bound) << "position " << start + i;
      ASSERT_NEAR(double(z[1][size_t(i)]), double(z[0][size_t(i)]), bound) << "position " << start + i;
    }
  }
}

TEST_P(IsaTables, UniformsExactNormalsWithinBoundOfScalarRecipe) {
  check_normals<float>(GetParam());
  check_normals<double>(GetParam());
}

// Gamma variates agree with rng::gamma_variate within kGammaBound (random_bounds.hpp) plus the
// boost's exponent rounding. Shape 0.05 also takes the scalar fallback (float U^(1/a) below the
// smallest normal number).

template <class T>
void check_gammas(Isa isa) {
  using Sampling = cpu::SamplingKernels<T>;
  const Sampling table = LSA_NATIVE_KERNELS_FOR(isa, Sampling, sampling_kernels<T>());
  const lsa_native::rng::StreamAddress a{lsa_native::rng::philox_key(977), 2, 5, 9};
  const double eps = std::numeric_limits<T>::epsilon();
  for (double shape : {0.05, 0.3, 1.0, 2.5, 40.0}) {
    const index_t n = 203;
    std::vector<T> g(static_cast<size_t>(n), T(NAN));
    table.gammas(a, 11, n, T(shape), g.data());
    for (index_t i = 0; i < n; ++i) {
      const double exact = double(lsa_native::rng::gamma_variate<T>(a, std::uint32_t(11 + i), T(shape)));
      // (an exact 0, float's U^(1/a) underflowing, must be matched exactly: both take libm there)
      const double boost = shape < 1 && exact > 0 ? 4 * eps * (std::fabs(std::log(exact)) + 1) : 0.0;
      ASSERT_NEAR(double(g[size_t(i)]), exact, (lsa_native::test::kGammaBound<T> + boost) * exact)
          << "shape " << shape << ", variate " << i;
    }
  }
}

TEST_P(IsaTables, GammasWithinBoundOfScalarRecipe) {
  check_gammas<float>(GetParam());
  check_gammas<double>(GetParam());
}

TEST_P(IsaTables, SmallMatrixKernelsAgreeWithBaseline) {
  std::mt19937_64 gen(41);
  std::normal_distribution<double> g;
  using Small = cpu::SmallMatrixKernels;
  const Small tables[] = {LSA_NATIVE_KERNELS_FOR(Isa::baseline, Small, small_matrix_kernels()),
                          LSA_NATIVE_KERNELS_FOR(GetParam(), Small, small_matrix_kernels())};
  for (index_t n : {1, 2, 5, 8, 13, 50}) {
    std::vector<double> a(static_cast<size_t>(n * n)), b(a.size()), x(static_cast<size_t>(n));
    for (auto* v : {&a, &b, &x})
      for (auto& e : *v) e = g(gen);
    std::vector<double> c[2], y[2], yt[2];
    for (int t = 0; t < 2; ++t) {
      c[t].assign(a.size(), NAN);
      y[t].assign(x.size(), NAN);
      yt[t].assign(x.size(), NAN);
      tables[t].matmul(a.data(), b.data(), c[t].data(), n);
      tables[t].matvec(a.data(), x.data(), y[t].data(), n);
      tables[t].matvec_t(a.data(), x.data(), yt[t].data(), n);
    }
    EXPECT_LT(relative_gap(c[0], c[1]), 1e-13) << "n = " << n;
    EXPECT_LT(relative_gap(y[0], y[1]), 1e-13) << "n = " << n;
    EXPECT_LT(relative_gap(yt[0], yt[1]), 1e-13) << "n = " << n;
    for (double v : c[0]) ASSERT_TRUE(std::isfinite(v));
  }
}

std::string isa_name(const ::testing::TestParamInfo<Isa>& info) {
  std::string s = cpu::isa_label(info.param);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

// Every table of the list, the baseline's own included (a check of the harness: it must agree
// with itself), each against the baseline.
INSTANTIATE_TEST_SUITE_P(EveryIsa, IsaTables, ::testing::ValuesIn(kAllIsas), isa_name);

// The mechanism itself: the chosen ISA is supported and has a label; the baseline is always
// supported; without LSA_NATIVE_CPU_ISA the best supported ISA is chosen.
TEST(IsaMechanism, ChoosesBestSupportedTable) {
  EXPECT_TRUE(cpu::isa_supported(Isa::baseline));
  const Isa chosen = cpu::cpu_isa();
  EXPECT_TRUE(cpu::isa_supported(chosen));
  if (std::getenv("LSA_NATIVE_CPU_ISA") == nullptr) {
    for (Isa isa : kAllIsas) {
      if (static_cast<int>(isa) > static_cast<int>(chosen)) {
        EXPECT_FALSE(cpu::isa_supported(isa));
      }
    }
  }
  EXPECT_STRNE(cpu::isa_label(chosen), "");
}

}  // namespace
