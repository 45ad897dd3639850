// Sampling CPU kernels for the baseline instruction set.
#define LSA_ISA_NS isa_baseline
#include "cpu/sampling_kernels.inl"
