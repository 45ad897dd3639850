// The host part of the small-matrix kit (common/small_matrix.hpp holds the LSA_HD part, and
// cpu/small_matrix_simd.hpp the register tiles): dense products of row-major n x n double matrices,
// compiled once per instruction set (small_matrix_kernels.inl in small_matrix_kernels_{base,avx2,avx512}.cpp)
// and chosen at run time, and the argument check of covariance-like matrices.
#pragma once

#include "cpu/isa.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native::cpu {

struct SmallMatrixKernels {
  // C = A B for row-major n x n A, B, C (C aliases neither).
  void (*matmul)(const double* a, const double* b, double* c, index_t n);
  // y = A x and y = Aᵀ x for row-major n x n A (y != x).
  void (*matvec)(const double* a, const double* x, double* y, index_t n);
  void (*matvec_t)(const double* a, const double* x, double* y, index_t n);
};

LSA_NATIVE_DECLARE_PER_ISA(SmallMatrixKernels small_matrix_kernels();)

// The kernels for this CPU (small_matrix_cpu.cpp).
const SmallMatrixKernels& small_matrix_kernels();
// C = A B with the kernel for this CPU.
inline void matmul(const double* a, const double* b, double* c, index_t n) {
  small_matrix_kernels().matmul(a, b, c, n);
}

// Throws Error unless a [n, n] is finite, symmetric (to 1e-10 of its largest entry) and positive
// definite (its Cholesky factorization exists). Messages name it "name" or, for index >= 0,
// "name[index]"; they are built only on failure (this runs on every population-loss evaluation).
void require_symmetric_positive_definite(const double* a, index_t n, const char* name,
                                         index_t index = -1);

}  // namespace lsa_native::cpu
