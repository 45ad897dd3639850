// Multi-threaded streaming sum: the read-bandwidth probe of bench.hpp.
#include <algorithm>
#include <vector>

#include "common/parallel.hpp"
#include "lsa_native/bench.hpp"

namespace lsa_native {

template <class T>
double stream_sum(const T* x, index_t n) {
  detail::require(x != nullptr || n == 0, "stream_sum: x must not be null");
  detail::require(n >= 0, "stream_sum: n must be >= 0");
  constexpr index_t kBlock = 1 << 16;
  const index_t n_blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(n_blocks), 0.0);
  detail::parallel_for(n_blocks, [&](index_t blk) {
    const T* p = x + blk * kBlock;
    const index_t len = std::min(kBlock, n - blk * kBlock);
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (index_t i = 0; i < len; ++i) acc += p[i];
    partial[blk] = double(acc);
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

template double stream_sum<float>(const float*, index_t);
template double stream_sum<double>(const double*, index_t);

}  // namespace lsa_native
