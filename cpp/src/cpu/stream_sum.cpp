// Multi-threaded streaming sum: the read-bandwidth probe of bench.hpp.
#include <algorithm>
#include <vector>

#include "common/parallel.hpp"
#include "cpu/simd.hpp"
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
    // Four vector accumulators (baseline vectors: memory-bound, no ISA dispatch needed).
    constexpr index_t L = cpu::simd::kLanes<T>;
    cpu::simd::Vec<T> acc[4] = {};
    index_t i = 0;
    for (; i + 4 * L <= len; i += 4 * L)
      for (int k = 0; k < 4; ++k) acc[k] += cpu::simd::load(p + i + k * L);
    T sum = cpu::simd::hsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
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
