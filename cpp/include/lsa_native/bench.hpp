// Machine probes for benchmarks: the read-bandwidth roofline the LSA kernels are measured against.
#pragma once

#include "lsa_native/types.hpp"

namespace lsa_native {

// Σ x_i over n contiguous values, read once on num_threads() threads with SIMD partial sums.
// Timing it over an array as large as a kernel's input gives that kernel's memory roofline.
template <class T>
double stream_sum(const T* x, index_t n);

extern template double stream_sum<float>(const float*, index_t);
extern template double stream_sum<double>(const double*, index_t);

}  // namespace lsa_native
