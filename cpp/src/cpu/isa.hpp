// The one ISA mechanism of the CPU kernels: each kernel table's .inl is compiled once per
// instruction set below (a file <table>_<suffix>.cpp defining LSA_ISA_NS = isa_<name>; the sources
// and their compile options are listed once in CMakeLists.txt), and the table for this CPU is
// chosen once at run time. No -m flag reaches other code.
#pragma once

#include <type_traits>

namespace lsa_native::cpu {

// The instruction sets with a build of every kernel table, in rising order: X(name, label, ...)
// with `name` the namespace suffix (isa_<name>) and `label` what cpu_kernel_isa() reports. The
// extra arguments are passed through to X. Without x86 dispatch only the baseline is compiled.
#if defined(LSA_NATIVE_X86_DISPATCH)
#define LSA_NATIVE_CPU_ISAS(X, ...)        \
  X(baseline, "baseline", __VA_ARGS__)     \
  X(avx2, "avx2-fma", __VA_ARGS__)         \
  X(avx512, "avx512", __VA_ARGS__)
#else
#define LSA_NATIVE_CPU_ISAS(X, ...) X(baseline, "baseline", __VA_ARGS__)
#endif

#define LSA_NATIVE_ISA_ENUM_(name, label, ...) name,
enum class Isa { LSA_NATIVE_CPU_ISAS(LSA_NATIVE_ISA_ENUM_, ~) };
#undef LSA_NATIVE_ISA_ENUM_

// Whether this CPU (and its OS: AVX state for AVX2, ZMM/opmask state for AVX-512, read from XCR0)
// can run the tables compiled for `isa`.
bool isa_supported(Isa isa);
// The tables' instruction set, chosen once: the best one supported, or the one the environment
// variable LSA_NATIVE_CPU_ISA names (a label or a name: baseline, avx2-fma/avx2, avx512) when it is
// supported — else the best supported one below it (forcing a table for tests and comparisons).
Isa cpu_isa();
// The label of `isa` ("baseline", "avx2-fma", "avx512").
const char* isa_label(Isa isa);

// Kept for callers that only ask about AVX2: whether the chosen tables use AVX2 or better.
inline bool use_avx2_kernels() { return cpu_isa() != Isa::baseline; }

// The kernel table of instruction set `isa` built by its factory (factories in the order of
// LSA_NATIVE_CPU_ISAS; one that returns no Table ends the list).
template <class Table, class... Factory>
Table make_kernels(Isa isa, Factory... factory) {
  const int wanted = static_cast<int>(isa);
  int index = 0;
  Table t{};
  auto pick = [&](auto make) {
    if constexpr (std::is_same_v<decltype(make()), Table>) {
      if (index == wanted) t = make();
    }
    ++index;
  };
  (pick(factory), ...);
  return t;
}

// The kernel table of the chosen instruction set (cpu_isa()), built once.
template <class Table, class... Factory>
const Table& select_kernels(Factory... factory) {
  static const Table table = make_kernels<Table>(cpu_isa(), factory...);
  return table;
}

// Declares the factory of a kernel table in every instruction-set namespace (its .inl defines it
// once per ISA), e.g. LSA_NATIVE_DECLARE_PER_ISA(template <class T> Table<T> table_kernels();).
#define LSA_NATIVE_DECLARE_IN_ISA_(name, label, ...) \
  namespace isa_##name {                             \
  __VA_ARGS__                                        \
  }
#define LSA_NATIVE_DECLARE_PER_ISA(...) LSA_NATIVE_CPU_ISAS(LSA_NATIVE_DECLARE_IN_ISA_, __VA_ARGS__)

// The table for this CPU built by `factory` (an expression naming the table's factory, e.g.
// lsa_kernels<T>()) in the namespace isa_<name> of the chosen instruction set.
#define LSA_NATIVE_ISA_FACTORY_(name, label, ...) [] { return ::lsa_native::cpu::isa_##name::__VA_ARGS__; },
#define LSA_NATIVE_SELECT_KERNELS(Table, ...)                   \
  ::lsa_native::cpu::select_kernels<Table>(                     \
      LSA_NATIVE_CPU_ISAS(LSA_NATIVE_ISA_FACTORY_, __VA_ARGS__) \
      [] { return 0; })
// The table of instruction set `isa` (any compiled one, supported by this CPU or not: calling its
// kernels needs isa_supported(isa)), e.g. for tests that compare every table with the baseline.
#define LSA_NATIVE_KERNELS_FOR(isa, Table, ...)                 \
  ::lsa_native::cpu::make_kernels<Table>(                       \
      isa, LSA_NATIVE_CPU_ISAS(LSA_NATIVE_ISA_FACTORY_, __VA_ARGS__) [] { return 0; })

}  // namespace lsa_native::cpu
