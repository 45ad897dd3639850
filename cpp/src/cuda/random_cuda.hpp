// CUDA implementations of cuda_random.hpp; arguments are validated by sampling_dispatch.cpp.
#pragma once

#include <cstdint>

#include "lsa_native/cuda_random.hpp"

namespace lsa_native::cuda {

void philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed, std::uint32_t* out);
template <class T>
void random_variates(const StreamId& id, std::uint64_t start, index_t n, T* out, bool normal);

}  // namespace lsa_native::cuda
