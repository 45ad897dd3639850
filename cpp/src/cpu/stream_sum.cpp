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
    // 64 bytes of independent scalar sums per step: the compiler keeps them in registers as
    // baseline (SSE2) vectors. (An array of the 32-byte simd::Vec lived on the stack in this
    // baseline unit: the probe read at about half of what numpy reads.)
    constexpr index_t K = 64 / sizeof(T);
    T acc[K] = {};
    index_t i = 0;
    for (; i + K <= len; i += K)
      for (index_t k = 0; k < K; ++k) acc[k] += p[i + k];
    T sum = 0;
    for (index_t k = 0; k < K; ++k) sum += acc[k];
    for (; i < len; ++i) sum += p[i];
    partial[blk] = double(sum);
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

template double stream_sum<float>(const float*, index_t);
template double stream_sum<double>(const double*, index_t);

}  // namespace lsa_native
