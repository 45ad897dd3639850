// A random kernel-attention problem (prompts, targets, parameters, upstream gradient) for the C++
// tests that compare backends and recipes.
#pragma once

#include <random>
#include <vector>

#include "lsa_native/kernel_attention.hpp"

namespace lsa_native::testing {

template <class T>
struct KaProblem {
  KernelAttentionShape shape;
  std::vector<Activation> acts;       // [H]
  std::vector<T> Z0, y_q, V, Bq, Ck;  // [B, d+1, n+1], [B], [L, H, d+1, d+1], [L, H, d, d] x 2
  std::vector<T> d_Z;                 // [B, d+1, n+1] upstream gradient of Z_L
};

// Entries normal (seeded): Z0 and d_Z standard, V with standard deviation 0.3 / (d+1), B and C
// with `logit_scale` / d (logits S of order logit_scale² · |x|²: pass a large scale for large
// logits), y_q standard.
template <class T>
KaProblem<T> random_ka_problem(const KernelAttentionShape& s, std::vector<Activation> acts,
                               unsigned seed, double logit_scale = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  const index_t d = s.dim, D = d + 1, per = D * (s.context + 1), LH = s.layers * s.heads;
  KaProblem<T> p{s, std::move(acts), std::vector<T>(s.batch * per), std::vector<T>(s.batch),
                 std::vector<T>(LH * D * D), std::vector<T>(LH * d * d), std::vector<T>(LH * d * d),
                 std::vector<T>(s.batch * per)};
  auto fill = [&](std::vector<T>& v, double scale) {
    for (auto& x : v) x = T(scale * normal(gen));
  };
  fill(p.Z0, 1.0);
  fill(p.y_q, 1.0);
  fill(p.V, 0.3 / double(D));
  fill(p.Bq, logit_scale / double(d));
  fill(p.Ck, logit_scale / double(d));
  fill(p.d_Z, 1.0);
  return p;
}

}  // namespace lsa_native::testing
