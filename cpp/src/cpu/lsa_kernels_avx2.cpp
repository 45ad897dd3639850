// LSA CPU kernels (batched LSA, prediction VJP) compiled with -mavx2 -mfma; chosen at run time
// when the CPU supports them.
#define LSA_ISA_NS isa_avx2
#include "cpu/lsa_kernels.inl"
#include "cpu/lsa_predict_vjp.inl"
#include "cpu/multihead_kernels.inl"
