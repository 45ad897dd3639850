// Small-matrix kernels for the baseline instruction set.
#define LSA_ISA_NS isa_baseline
#include "cpu/small_matrix_kernels.inl"
