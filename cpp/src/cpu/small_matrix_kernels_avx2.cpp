// Small-matrix kernels compiled with -mavx2 -mfma; chosen at run time when the CPU supports them.
#define LSA_ISA_NS isa_avx2
#include "cpu/small_matrix_kernels.inl"
