// H-head population-loss kernels for the baseline instruction set.
#define LSA_ISA_NS isa_baseline
#include "cpu/population_multihead_kernels.inl"
