// The CPU H-head Wishart step computes kWishartLanes prompts at once, one prompt per SIMD lane
// (multihead_kernels.inl: wishart_prompt stages a prompt, wishart_lanes_compute runs a group,
// wishart_flush the last partial one and adds the lanes). Its scalar recipe is
// multihead::heads_residual + multihead::accumulate (common/multihead_recipe.hpp), itself tied to
// the token route in test_multihead_emulated.cpp. Here, on the same recorded draws, every compiled
// instruction set's lanes give the recipe's sums [Σ r², Σ r G q_h, Σ r (G p_h) e_qᵀ] to within the
// rounding bound of T, float and double, H = 1 and H > 1, full lane groups and a tail; and the same
// bound rejects the sums with the largest prompt left out (tight enough to see a lost lane).
//
// The bound (`Bound`): both routes do the same operations in the same order, but each is compiled
// with its own contraction of a·b + c (FMA in the ISA units) and may round every step differently.
// Every quantity v of a prompt is a nested sum of products; the usual forward bound gives
// |Δv| <= γ_n · |v|_abs with |v|_abs the same computation on absolute values (all terms added with
// their sizes) and γ_n = n u / (1 − n u), u = ε_T / 2, n the depth of the nesting. |v|_abs is
// computed here by running the recipe itself, in double, on |draws|, |parameters| and |L|. For a
// sum Σ_b r_b x_b: |Δ| <= Σ_b (|Δr| |x| + |r| |Δx|) <= 3 γ_n Σ_b |r|_abs |x|_abs (x = G q_h, or
// G p_h times e_q: three rounded factors), plus the double accumulation in another order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/multihead_recipe.hpp"
#include "common/wishart.hpp"
#include "cpu/isa.hpp"
#include "cpu/multihead_kernels.hpp"
#include "cpu/sampling_kernels.hpp"

namespace {

using lsa_native::index_t;
using lsa_native::CovarianceLaw;
using lsa_native::cpu::Isa;
namespace multihead = lsa_native::multihead;
namespace wishart = lsa_native::wishart;
namespace cpu = lsa_native::cpu;
template <class T>
using Law = lsa_native::linear::Law<T>;

// One prompt's draws as the sampler hands them to a visitor (sampling_kernels.hpp).
template <class T>
struct Draw {
  std::vector<T> z, chi2, w, lam_sqrt;  // lam_sqrt empty: not a random covariance law
};

template <class T>
struct Recorder {
  const Law<T>* P;
  std::vector<Draw<T>> draws;
};

template <class T>
void record(void* ctx, index_t, const T* z, const T* chi2, const T* w, const T* lam_sqrt) {
  auto& rec = *static_cast<Recorder<T>*>(ctx);
  const Law<T>& P = *rec.P;
  const index_t d = P.d, dp = wishart::noise_dim(P), nz = wishart::bartlett_normals_used(P);
  Draw<T> dr{std::vector<T>(z, z + nz), std::vector<T>(chi2, chi2 + dp), std::vector<T>(w, w + d), {}};
  if (P.random_cov()) dr.lam_sqrt.assign(lam_sqrt, lam_sqrt + d);
  rec.draws.push_back(std::move(dr));
}

// The draws of prompts [0, B) of law P (the sampler of this CPU's instruction set).
template <class T>
std::vector<Draw<T>> draws_of(const Law<T>& P, index_t B) {
  Recorder<T> rec{&P, {}};
  LSA_NATIVE_SELECT_KERNELS(cpu::SamplingKernels<T>, sampling_kernels<T>())
      .wishart_prompts(P, 0, B, cpu::WishartVisitor<T>{&record<T>, &rec});
  return rec.draws;
}

template <class T>
const T* lam_of(const Draw<T>& dr) {
  return dr.lam_sqrt.empty() ? nullptr : dr.lam_sqrt.data();
}

// The recipe's per-prompt work arrays and the heads arranged by heads_inner.
template <class T>
struct RecipeWork {
  std::vector<T> work, p_t, W_kq_t;
  wishart::Work<T> s;
  multihead::HeadsWork<T> h;
  RecipeWork(const Law<T>& P, index_t H, const T* W_pv, const T* W_kq) {
    const index_t d = P.d, dp = wishart::noise_dim(P), rows = d + 1;
    const index_t nw = wishart::Work<T>::size(d, dp);
    work.assign(static_cast<size_t>(nw + multihead::HeadsWork<T>::size(H, d, dp)), T(0));
    p_t.resize(static_cast<size_t>(H * rows));
    W_kq_t.resize(static_cast<size_t>(H * rows * rows));
    multihead::heads_inner(H, rows, W_pv, W_kq, p_t.data(), W_kq_t.data());
    s = wishart::Work<T>::at(work.data(), d, dp);
    h = multihead::HeadsWork<T>::at(work.data() + nw, H, d, dp);
  }
};

// The scalar recipe's sums over the prompts (prompt order), without prompt `skip` (-1: none).
template <class T>
std::vector<double> recipe_sums(const Law<T>& P, index_t H, const T* W_pv, const T* W_kq,
                                const std::vector<Draw<T>>& draws, index_t skip = -1) {
  RecipeWork<T> rw(P, H, W_pv, W_kq);
  std::vector<double> acc(static_cast<size_t>(multihead::loss_grad_width(H, P.d + 1)), 0.0);
  for (index_t b = 0; b < index_t(draws.size()); ++b) {
    if (b == skip) continue;
    const Draw<T>& dr = draws[b];
    const double r = multihead::heads_residual(P, H, rw.p_t.data(), rw.W_kq_t.data(), dr.z.data(),
                                               dr.chi2.data(), dr.w.data(), lam_of(dr), rw.s, rw.h);
    multihead::accumulate(r, rw.s.e_q, rw.h, H, P.d + 1, acc.data());
  }
  return acc;
}

// The prompt of largest r² (a lost prompt the bound must see).
template <class T>
index_t largest_prompt(const Law<T>& P, index_t H, const T* W_pv, const T* W_kq,
                       const std::vector<Draw<T>>& draws) {
  const std::vector<double> all = recipe_sums(P, H, W_pv, W_kq, draws);
  index_t best = 0;
  double most = -1;
  for (index_t b = 0; b < index_t(draws.size()); ++b) {
    const double r2 = all[0] - recipe_sums(P, H, W_pv, W_kq, draws, b)[0];
    if (r2 > most) most = r2, best = b;
  }
  return best;
}

// The lanes route of instruction set `table` over the same draws: the driver of
// multihead_cpu.cpp's fused_wishart_partial for one range [0, B).
template <class T>
std::vector<double> lane_sums(const cpu::MultiHeadKernels<T>& table, const Law<T>& P, index_t H,
                              const T* W_pv, const T* W_kq, const std::vector<Draw<T>>& draws) {
  const index_t d = P.d, dp = wishart::noise_dim(P);
  RecipeWork<T> rw(P, H, W_pv, W_kq);
  std::vector<T> lanes(static_cast<size_t>(cpu::wishart_lane_values<T>(d, dp, H)), T(0));
  std::vector<double> lane_acc(static_cast<size_t>(cpu::wishart_lane_sums<T>(d, H)), 0.0);
  std::vector<double> acc(static_cast<size_t>(cpu::multihead_loss_grad_partial_size(d, H)), 0.0);
  cpu::WishartHeads<T> ctx{&P,   H,         rw.p_t.data(), rw.W_kq_t.data(), rw.s, rw.h,
                           acc.data(), lanes.data(), 0, lane_acc.data()};
  for (size_t b = 0; b < draws.size(); ++b)
    table.wishart_prompt(&ctx, index_t(b), draws[b].z.data(), draws[b].chi2.data(),
                         draws[b].w.data(), lam_of(draws[b]));
  table.wishart_flush(&ctx);
  return acc;
}

// The allowed difference of every entry of the sums (see the top of the file): 3 γ_n Σ_b |r|_abs
// |x|_abs from the recipe run in double on absolute values, + the double sums' reordering.
template <class T>
std::vector<double> rounding_bound(const Law<T>& P, index_t H, const std::vector<T>& W_pv,
                                   const std::vector<T>& W_kq, const std::vector<Draw<T>>& draws) {
  const index_t d = P.d, rows = d + 1, dp = wishart::noise_dim(P);
  auto absolute = [](const std::vector<T>& v) {
    std::vector<double> a(v.size());
    for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(double(v[i]));
    return a;
  };
  Law<double> Pa;  // the law with |L|, |Lq| (σ >= 0, λ >= 0 already)
  Pa.d = P.d;
  Pa.N = P.N;
  Pa.sigma = double(P.sigma);
  Pa.query_noise = P.query_noise;
  Pa.tasks = P.tasks;
  Pa.law = P.law;
  std::vector<double> La, Lqa;
  if (P.L) {
    La = absolute(std::vector<T>(P.L, P.L + d * d));
    Pa.L = La.data();
  }
  if (P.Lq) {
    Lqa = absolute(std::vector<T>(P.Lq, P.Lq + d * d));
    Pa.Lq = Lqa.data();
  }
  const std::vector<double> pv = absolute(W_pv), kq = absolute(W_kq);
  RecipeWork<double> rw(Pa, H, pv.data(), kq.data());
  std::vector<double> bound(static_cast<size_t>(multihead::loss_grad_width(H, rows)), 0.0);
  double* d_p = bound.data() + 1;
  double* d_K = d_p + H * rows;
  for (const Draw<T>& dr : draws) {
    const std::vector<double> z = absolute(dr.z), chi2 = absolute(dr.chi2), w = absolute(dr.w),
                              lam = absolute(dr.lam_sqrt);
    const double* lam_p = lam.empty() ? nullptr : lam.data();
    // ŷ_abs − y_abs; y_abs from the same absolute e_q: |r|_abs = ŷ_abs + y_abs
    const double diff = multihead::heads_residual(Pa, H, rw.p_t.data(), rw.W_kq_t.data(), z.data(),
                                                  chi2.data(), w.data(), lam_p, rw.s, rw.h);
    const double r_abs = diff + 2 * wishart::query_target(Pa, w.data(), rw.s.e_q, z.data());
    const index_t W = 2 * H;
    bound[0] += r_abs * r_abs;
    for (index_t j = 0; j < H; ++j)
      for (index_t k = 0; k < rows; ++k) {
        d_p[j * rows + k] += r_abs * rw.h.GX[k * W + H + j];
        for (index_t c = 0; c + 1 < rows; ++c)
          d_K[(j * rows + k) * rows + c] += r_abs * rw.h.GX[k * W + j] * rw.s.e_q[c];
      }
  }
  const double n = double(4 * rows + 2 * dp + H * (dp + 2) + 8);  // depth of the nesting
  const double u = 0.5 * double(std::numeric_limits<T>::epsilon());
  const double gamma = n * u / (1 - n * u);
  const double reorder = double(draws.size() + 1) * std::numeric_limits<double>::epsilon();
  for (double& b : bound) b *= 3 * gamma + reorder;
  return bound;
}

// A law of the test: sizes, heads, label noise, covariance and task options.
struct Case {
  const char* name;
  index_t d, N, H;
  double sigma = 0;
  bool query_noise = false, factor = false, query_factor = false;
  std::uint32_t tasks = 0;
  CovarianceLaw law = CovarianceLaw::fixed;
  double law_a = 0, law_b = 0;
};

const Case kCases[] = {
    {"H=1 d=1 N=1", 1, 1, 1},
    {"H=1 plain", 3, 7, 1},
    {"H=4, Lambda factor, query noise", 5, 20, 4, 0.4, true, true},
    {"H=3, query shift", 4, 6, 3, 0, false, true, true},
    {"H=2, task pool, noise", 2, 3, 2, 0.2, false, false, false, 3},
    {"H=3, gamma law", 3, 40, 3, 0, false, false, false, 0, CovarianceLaw::gamma, 0.6, 2.0},
};

// A lower triangular factor with a positive diagonal.
template <class T>
std::vector<T> factor(index_t d, std::mt19937_64& gen) {
  std::normal_distribution<double> normal;
  std::vector<T> L(static_cast<size_t>(d * d), T(0));
  for (index_t i = 0; i < d; ++i) {
    for (index_t j = 0; j < i; ++j) L[i * d + j] = T(0.4 * normal(gen));
    L[i * d + i] = T(0.8 + 0.3 * std::fabs(normal(gen)));
  }
  return L;
}

#define LSA_TEST_ISA_VALUE(name, label, ...) Isa::name,
const std::vector<Isa> kIsas = {LSA_NATIVE_CPU_ISAS(LSA_TEST_ISA_VALUE, ~)};
#undef LSA_TEST_ISA_VALUE

template <class T>
void check_lanes_equal_the_recipe() {
  constexpr index_t L = cpu::kWishartLanes<T>;
  std::mt19937_64 gen(2026);
  std::normal_distribution<double> normal;
  for (const Case& c : kCases) {
    const index_t n2 = (c.d + 1) * (c.d + 1);
    std::vector<T> W_pv(static_cast<size_t>(c.H * n2)), W_kq(W_pv.size());
    for (auto& x : W_pv) x = T(0.5 * normal(gen));
    for (auto& x : W_kq) x = T(0.5 * normal(gen));
    const std::vector<T> Lf = factor<T>(c.d, gen), Lq = factor<T>(c.d, gen);
    Law<T> P;
    P.d = c.d;
    P.N = c.N;
    P.key = lsa_native::rng::philox_key(77 + std::uint64_t(c.d) * 1000 + std::uint64_t(c.H));
    P.step = 3;
    P.L = c.factor ? Lf.data() : nullptr;
    P.Lq = c.query_factor ? Lq.data() : nullptr;
    P.sigma = T(c.sigma);
    P.query_noise = c.query_noise;
    P.tasks = c.tasks;
    P.law = c.law;
    P.law_a = T(c.law_a);
    P.law_b = T(c.law_b);
    for (const index_t B : {index_t(3), 2 * L + 3, 2 * L}) {  // a tail only; groups + tail; groups
      const std::vector<Draw<T>> draws = draws_of(P, B);
      ASSERT_EQ(index_t(draws.size()), B);
      const std::vector<double> want = recipe_sums(P, c.H, W_pv.data(), W_kq.data(), draws);
      const std::vector<double> bound = rounding_bound(P, c.H, W_pv, W_kq, draws);
      // power: the sums without the prompt of largest r² are rejected by the same bound
      const std::vector<double> fewer = recipe_sums(
          P, c.H, W_pv.data(), W_kq.data(), draws, largest_prompt(P, c.H, W_pv.data(), W_kq.data(), draws));
      bool rejected = false;
      for (size_t i = 0; i < want.size(); ++i) rejected |= std::fabs(fewer[i] - want[i]) > bound[i];
      EXPECT_TRUE(rejected) << c.name << ", B = " << B << ": the bound cannot see a lost prompt";
      for (const Isa isa : kIsas) {
        if (!cpu::isa_supported(isa)) continue;
        const auto table = LSA_NATIVE_KERNELS_FOR(isa, cpu::MultiHeadKernels<T>, multihead_kernels<T>());
        const std::vector<double> got = lane_sums(table, P, c.H, W_pv.data(), W_kq.data(), draws);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_LE(std::fabs(got[i] - want[i]), bound[i])
              << c.name << ", " << cpu::isa_label(isa) << ", B = " << B << ", entry " << i
              << ": lanes " << got[i] << " vs recipe " << want[i];
      }
    }
  }
}

TEST(MultiHeadWishartLanes, EqualTheScalarRecipeFloat) { check_lanes_equal_the_recipe<float>(); }
TEST(MultiHeadWishartLanes, EqualTheScalarRecipeDouble) { check_lanes_equal_the_recipe<double>(); }

}  // namespace
