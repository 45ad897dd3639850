// The counter-based variates of sampling.hpp computed on a CUDA device: the same Philox4x32-10
// words bit for bit, normals and uniforms equal to the CPU's up to the rounding of the device's
// log/sin/cos. Each pointer may be device memory (used in place) or host memory (copied in and
// out). Throws lsa_native::Error for invalid arguments, without CUDA kernels, or without a GPU.
#pragma once

#include <cstdint>

#include "lsa_native/sampling.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

//   counters [n, 4], out [n, 4] (written)
void cuda_philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed,
                        std::uint32_t* out);
// out[i] = the variate at position start + i of the stream, i < n.   out [n] (written)
template <class T>
void cuda_random_normals(const StreamId& id, std::uint64_t start, index_t n, T* out);
template <class T>
void cuda_random_uniforms(const StreamId& id, std::uint64_t start, index_t n, T* out);

}  // namespace lsa_native
