// CUDA kernels of the counter-based variates (sampling.hpp): one thread per output, each a pure
// function of (seed, step, prompt, stream, position) through the LSA_HD recipes of
// common/philox.hpp and common/random.hpp, so raw words equal the CPU's bit for bit and normals
// and uniforms equal them up to the rounding of the device's log/sin/cos. Included by
// random_cuda.cu and by the CPU emulation test.
#pragma once

#include <cstdint>

#include "common/philox.hpp"
#include "common/random.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::cuda::kernels {
namespace {

// out[i, :] = Philox4x32-10(counters[i, :]) under key; counters, out [n, 4].
__global__ void philox_kernel(const std::uint32_t* __restrict__ counters, index_t n,
                              rng::PhiloxKey key, std::uint32_t* __restrict__ out) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    std::uint32_t c[4] = {counters[4 * i], counters[4 * i + 1], counters[4 * i + 2],
                          counters[4 * i + 3]};
    rng::philox4x32_10(c, key.k0, key.k1);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = c[j];
  }
}

// out[i] = the normal (kNormal) or uniform at position start + i of the stream a; out [n].
template <class T, bool kNormal>
__global__ void variates_kernel(rng::StreamAddress a, std::uint64_t start, index_t n,
                                T* __restrict__ out) {
  const index_t stride = index_t(gridDim.x) * blockDim.x;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t position = start + std::uint64_t(i);
    out[i] = kNormal ? rng::normal_at<T>(a, position) : rng::uniform_at<T>(a, position);
  }
}

}  // namespace
}  // namespace lsa_native::cuda::kernels
