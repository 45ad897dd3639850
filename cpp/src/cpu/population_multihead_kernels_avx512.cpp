// H-head population-loss kernels for AVX-512; chosen at run time when the CPU supports it.
#define LSA_ISA_NS isa_avx512
#include "cpu/population_multihead_kernels.inl"
