// LSA CPU kernels (batched LSA, prediction VJP) for the baseline instruction set.
#define LSA_ISA_NS isa_baseline
#include "cpu/lsa_kernels.inl"
#include "cpu/lsa_predict_vjp.inl"
#include "cpu/multihead_kernels.inl"
