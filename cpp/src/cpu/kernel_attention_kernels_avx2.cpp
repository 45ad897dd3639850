// Kernel-attention CPU kernels compiled with -mavx2 -mfma; chosen at run time when supported.
#define LSA_ISA_NS isa_avx2
#include "cpu/kernel_attention_kernels.inl"
