// Run-time choice between the baseline and the AVX2+FMA builds of the CPU kernels.
#pragma once

namespace lsa_native::cpu {

// True when this build has AVX2 kernels (x86-64, GCC/Clang) and the CPU supports AVX2 and FMA.
bool use_avx2_kernels();

// The kernel table for this CPU: `avx2()` or `baseline()`, chosen once.
template <class Table, class Avx2, class Baseline>
const Table& select_kernels(Avx2 avx2, Baseline baseline) {
#if defined(LSA_NATIVE_X86_DISPATCH)
  static const Table table = use_avx2_kernels() ? avx2() : baseline();
#else
  (void)avx2;
  static const Table table = baseline();
#endif
  return table;
}

// Declares the factory of a kernel table in both instruction-set namespaces (its .inl defines it
// once per ISA), e.g. LSA_NATIVE_DECLARE_PER_ISA(template <class T> Table<T> table_kernels();).
#define LSA_NATIVE_DECLARE_PER_ISA(...) \
  namespace isa_baseline {              \
  __VA_ARGS__                           \
  }                                     \
  namespace isa_avx2 {                  \
  __VA_ARGS__                           \
  }

// The table for this CPU built by `factory` (an expression, e.g. lsa_kernels<T>()) in the AVX2
// namespace isa_avx2 or the baseline one isa_baseline: the one ISA mechanism of the CPU kernels
// (each table's .inl is compiled once per instruction set; no -march flag reaches other code).
#if defined(LSA_NATIVE_X86_DISPATCH)
#define LSA_NATIVE_SELECT_KERNELS(Table, factory)                                    \
  ::lsa_native::cpu::select_kernels<Table>([] { return isa_avx2::factory; },        \
                                           [] { return isa_baseline::factory; })
#else
#define LSA_NATIVE_SELECT_KERNELS(Table, factory)                                    \
  ::lsa_native::cpu::select_kernels<Table>([] { return isa_baseline::factory; },    \
                                           [] { return isa_baseline::factory; })
#endif

}  // namespace lsa_native::cpu
