// Batched small symmetric-matrix routines over the LSA_HD kit of common/small_matrix.hpp (CPU,
// parallel over matrices): what the samplers factorize per prompt, exposed for tests and users.
// Layout: a [B, n, n] row-major. float or double. Invalid arguments throw lsa_native::Error.
#pragma once

#include <cstdint>

#include "lsa_native/types.hpp"

namespace lsa_native {

// In place: on success a[b] = L (lower triangle, zero strict upper) with L Lᵀ = A, ok[b] = 1;
// ok[b] = 0 when a pivot is not > 0 (A not numerically positive definite; a[b] then undefined).
template <class T>
void batched_cholesky(index_t batch, index_t n, T* a, std::int32_t* ok);

// Cyclic Jacobi: A = V diag(w) Vᵀ for symmetric a [B, n, n] (overwritten), w [B, n] (unsorted),
// v [B, n, n] (eigenvectors as columns), sweeps [B] (-1: not converged within max_sweeps).
template <class T>
void batched_symmetric_eigen(index_t batch, index_t n, T* a, T* w, T* v, std::int32_t* sweeps,
                             int max_sweeps = 30);

#define LSA_NATIVE_DECLARE_SMALL(T)                                                              \
  extern template void batched_cholesky<T>(index_t, index_t, T*, std::int32_t*);                 \
  extern template void batched_symmetric_eigen<T>(index_t, index_t, T*, T*, T*, std::int32_t*,   \
                                                  int);
LSA_NATIVE_DECLARE_SMALL(float)
LSA_NATIVE_DECLARE_SMALL(double)
#undef LSA_NATIVE_DECLARE_SMALL

}  // namespace lsa_native
