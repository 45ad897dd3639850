// H-head population-loss kernels for -mavx2 -mfma; chosen at run time when the CPU supports them.
#define LSA_ISA_NS isa_avx2
#include "cpu/population_multihead_kernels.inl"
