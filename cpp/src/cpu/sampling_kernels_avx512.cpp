// Sampling CPU kernels compiled for AVX-512 (F, VL, BW, DQ) + FMA; chosen at run time when the CPU
// and OS support them (isa.hpp).
#define LSA_ISA_NS isa_avx512
#include "cpu/sampling_kernels.inl"
