// The SIMD part of the small-matrix kit (common/small_matrix.hpp holds the LSA_HD part): dense
// products of row-major n x n double matrices, compiled once per instruction set
// (small_matrix_kernels.inl in small_matrix_kernels_{base,avx2}.cpp) and chosen at run time.
#pragma once

#include "lsa_native/types.hpp"

namespace lsa_native::cpu {

struct SmallMatrixKernels {
  // C = A B for row-major n x n A, B, C (C aliases neither).
  void (*matmul)(const double* a, const double* b, double* c, index_t n);
};

namespace isa_baseline {
SmallMatrixKernels small_matrix_kernels();
}
namespace isa_avx2 {
SmallMatrixKernels small_matrix_kernels();
}

// C = A B with the kernel for this CPU (small_matrix_cpu.cpp).
void matmul(const double* a, const double* b, double* c, index_t n);

}  // namespace lsa_native::cpu
