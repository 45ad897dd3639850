// A random LSA problem (prompts, targets, parameters, upstream gradient) for the C++ tests that
// compare backends and recipes.
#pragma once

#include <random>
#include <vector>

#include "lsa_native/lsa.hpp"

namespace lsa_native::testing {

template <class T>
struct LsaProblem {
  LsaShape shape;
  std::vector<T> E, y_q, W_pv, W_kq, d_F;  // [B, d+1, N+1], [B], [d+1, d+1] x 2, [B, d+1, N+1]
};

// Every entry standard normal (seeded): E, y_q, W_pv, W_kq, d_F.
template <class T>
LsaProblem<T> random_lsa_problem(index_t B, index_t d, index_t N, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  const index_t rc = (d + 1) * (N + 1), n2 = (d + 1) * (d + 1);
  LsaProblem<T> p{{B, d, N}, std::vector<T>(B * rc), std::vector<T>(B), std::vector<T>(n2),
                  std::vector<T>(n2), std::vector<T>(B * rc)};
  for (auto* v : {&p.E, &p.y_q, &p.W_pv, &p.W_kq, &p.d_F})
    for (auto& x : *v) x = T(normal(gen));
  return p;
}

}  // namespace lsa_native::testing
