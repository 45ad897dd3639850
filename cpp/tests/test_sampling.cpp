// The per-prompt Wishart recipe (common/wishart.hpp) against G formed explicitly, and the sampling
// API's contracts (determinism over threads, errors).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/wishart.hpp"
#include "lsa_native/device.hpp"
#include "lsa_native/sampling.hpp"

namespace {

using lsa_native::index_t;

TEST(Wishart, PredictAndGradsMatchExplicitGram) {
  std::mt19937 gen(7);
  std::normal_distribution<double> nd;
  for (index_t d : {1, 2, 5}) {
    for (bool noise : {false, true}) {
      for (int factor = 0; factor < 3; ++factor) {  // full L, diagonal, identity
        const index_t dp = noise ? d + 1 : d, rows = d + 1, N = 9;
        std::vector<double> L(d * d, 0.0), ls(d), w(d), Tm(dp * dp, 0.0), p(rows), q(rows), e_q(rows, 0.0);
        for (index_t k = 0; k < d; ++k) {
          for (index_t m = 0; m < k; ++m) L[k * d + m] = nd(gen);
          L[k * d + k] = 1.0 + std::fabs(nd(gen));
          ls[k] = 0.5 + std::fabs(nd(gen));
          w[k] = nd(gen);
          e_q[k] = nd(gen);
        }
        for (index_t i = 0; i < dp; ++i)
          for (index_t j = 0; j <= i; ++j) Tm[i * dp + j] = nd(gen);
        for (index_t r = 0; r < rows; ++r) {
          p[r] = nd(gen);
          q[r] = nd(gen);
        }
        const double sigma = 0.7;
        lsa_native::wishart::Prompt<double> P{d, dp, factor == 0 ? L.data() : nullptr,
                                              factor == 1 ? ls.data() : nullptr, w.data(), sigma,
                                              Tm.data(), 1.0 / std::sqrt(double(N))};
        // M = Ã L̃ T / √N explicitly: (d+1) x dp
        std::vector<double> Lt(dp * dp, 0.0), M(rows * dp, 0.0);
        for (index_t k = 0; k < d; ++k)
          for (index_t m = 0; m < d; ++m)
            Lt[k * dp + m] = factor == 0 ? L[k * d + m] : (k == m ? (factor == 1 ? ls[k] : 1.0) : 0.0);
        if (noise) Lt[d * dp + d] = 1.0;
        std::vector<double> LT(dp * dp, 0.0);
        for (index_t i = 0; i < dp; ++i)
          for (index_t j = 0; j < dp; ++j)
            for (index_t k = 0; k < dp; ++k) LT[i * dp + j] += Lt[i * dp + k] * Tm[k * dp + j];
        for (index_t j = 0; j < dp; ++j) {
          double y = 0;
          for (index_t k = 0; k < d; ++k) {
            M[k * dp + j] = LT[k * dp + j] / std::sqrt(double(N));
            y += w[k] * M[k * dp + j];
          }
          if (noise) y += sigma * LT[d * dp + j] / std::sqrt(double(N));
          M[d * dp + j] = y;
        }
        std::vector<double> G(rows * rows, 0.0);
        for (index_t a = 0; a < rows; ++a)
          for (index_t b = 0; b < rows; ++b) {
            for (index_t j = 0; j < dp; ++j) G[a * rows + b] += M[a * dp + j] * M[b * dp + j];
            G[a * rows + b] += e_q[a] * e_q[b] / double(N);
          }
        double y_ref = 0;
        std::vector<double> gp_ref(rows, 0.0), gk_ref(rows, 0.0);
        for (index_t a = 0; a < rows; ++a)
          for (index_t b = 0; b < rows; ++b) {
            y_ref += p[a] * G[a * rows + b] * q[b];
            gp_ref[a] += G[a * rows + b] * q[b];
            gk_ref[a] += G[a * rows + b] * p[b];
          }
        std::vector<double> gp(rows), gk(rows), scratch(3 * dp);
        const double y = lsa_native::wishart::predict_and_grads(P, p.data(), q.data(), e_q.data(),
                                                                1.0 / double(N), gp.data(), gk.data(),
                                                                scratch.data());
        EXPECT_NEAR(y, y_ref, 1e-12 * (1 + std::fabs(y_ref)));
        for (index_t a = 0; a < rows; ++a) {
          EXPECT_NEAR(gp[a], gp_ref[a], 1e-12 * (1 + std::fabs(gp_ref[a])));
          EXPECT_NEAR(gk[a], gk_ref[a], 1e-12 * (1 + std::fabs(gk_ref[a])));
        }
      }
    }
  }
}

TEST(Sampling, BatchIndependentOfThreadCount) {
  lsa_native::LinearPromptSpec s;
  s.dim = 3;
  s.context = 7;
  s.seed = 99;
  s.noise_std = 0.3;
  const index_t B = 777, n = B * 4 * 8;
  std::vector<float> E1(n), E2(n);
  lsa_native::LinearPromptOutputs<float> o;
  const int before = lsa_native::num_threads();
  lsa_native::set_num_threads(1);
  o.E = E1.data();
  lsa_native::sample_linear_prompts<float>(s, B, 5, o);
  lsa_native::set_num_threads(2);
  o.E = E2.data();
  lsa_native::sample_linear_prompts<float>(s, B, 5, o);
  lsa_native::set_num_threads(before);
  EXPECT_EQ(E1, E2);
}

// Every row of the covariance-law table (LSA_NATIVE_COVARIANCE_LAWS): its law in table order after
// `fixed`, a unique name, its parameter names first in params; its check refuses NaN parameters
// with a message naming the law.
TEST(Sampling, CovarianceLawTableRows) {
  std::vector<std::string> names;
  for (const auto& row : lsa_native::covariance_laws) {
    EXPECT_EQ(static_cast<size_t>(row.law), names.size() + 1);  // enum order: fixed, then the rows
    names.push_back(row.name);
    ASSERT_NE(row.params[0], nullptr) << row.name;
    for (int k = 1; k < 3; ++k) {
      if (row.params[k] != nullptr) {
        EXPECT_NE(row.params[k - 1], nullptr) << row.name;
      }
    }
    lsa_native::LinearPromptSpec s;
    s.dim = 2;
    s.context = 3;
    s.law = row.law;
    s.law_a = s.law_b = s.law_p = std::nan("");
    try {
      lsa_native::validate(s);
      ADD_FAILURE() << row.name << ": NaN parameters accepted";
    } catch (const lsa_native::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(std::string("covariance_law: ") + row.name, 0), 0u)
          << e.what();
    }
  }
  const std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
}

TEST(Sampling, BadSpecsThrow) {
  lsa_native::LinearPromptSpec s;
  s.dim = 2;
  s.context = 0;
  EXPECT_THROW(lsa_native::validate(s), lsa_native::Error);
  s.context = 3;
  s.noise_std = -1;
  EXPECT_THROW(lsa_native::validate(s), lsa_native::Error);
  s.noise_std = 0;
  s.law = lsa_native::CovarianceLaw::gamma;
  s.law_a = 0;
  EXPECT_THROW(lsa_native::validate(s), lsa_native::Error);
  s.law = lsa_native::CovarianceLaw::fixed;
  const double bad_chol[4] = {1.0, 0.0, 0.5, -1.0};
  s.chol = bad_chol;
  EXPECT_THROW(lsa_native::validate(s), lsa_native::Error);
  s.chol = nullptr;
  s.dim = 4;
  std::vector<float> W(25, 0.f), g(25);
  EXPECT_THROW(lsa_native::linear_prompts_lsa_loss_and_grad<float>(
                   s, 8, 0, lsa_native::FusedMethod::wishart, W.data(), W.data(), g.data(), g.data()),
               lsa_native::Error);  // N = 3 < d = 4
}

}  // namespace
