// Kernel-attention CPU kernels for the baseline instruction set.
#define LSA_ISA_NS isa_baseline
#include "cpu/kernel_attention_kernels.inl"
