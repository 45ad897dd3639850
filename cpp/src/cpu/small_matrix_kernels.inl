// Small dense products, included by one translation unit per instruction set with LSA_ISA_NS
// defined (small_matrix_kernels_{base,avx2,avx512}.cpp): the register tiles of small_matrix_simd.hpp.
#include "cpu/small_matrix_cpu.hpp"
#include "cpu/small_matrix_simd.hpp"

#ifndef LSA_ISA_NS
#error "define LSA_ISA_NS before including small_matrix_kernels.inl"
#endif

namespace lsa_native::cpu::LSA_ISA_NS {
namespace {

void matmul(const double* a, const double* b, double* c, index_t n) {
  small::multiply_dense(a, b, c, n, n);
}
void matvec(const double* a, const double* x, double* y, index_t n) { small::matvec_dense(a, x, y, n); }
void matvec_t(const double* a, const double* x, double* y, index_t n) {
  small::multiply_dense(x, a, y, 1, n);  // yᵀ = xᵀ A
}

}  // namespace

SmallMatrixKernels small_matrix_kernels() { return {&matmul, &matvec, &matvec_t}; }

}  // namespace lsa_native::cpu::LSA_ISA_NS
