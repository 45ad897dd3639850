// The run-time half of the ISA mechanism (isa.hpp): what this CPU and its OS support (cpuid and
// XCR0), and the one choice of the kernel tables' instruction set.
#include "cpu/isa.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "lsa_native/device.hpp"
#include "lsa_native/types.hpp"

#if defined(LSA_NATIVE_X86_DISPATCH)
#include <cpuid.h>
#endif

namespace lsa_native {
namespace cpu {
namespace {

#define LSA_NATIVE_ISA_LABEL_(name, label, ...) label,
constexpr const char* kLabels[] = {LSA_NATIVE_CPU_ISAS(LSA_NATIVE_ISA_LABEL_, ~)};
#undef LSA_NATIVE_ISA_LABEL_
#define LSA_NATIVE_ISA_NAME_(name, label, ...) #name,
constexpr const char* kNames[] = {LSA_NATIVE_CPU_ISAS(LSA_NATIVE_ISA_NAME_, ~)};
#undef LSA_NATIVE_ISA_NAME_
constexpr int kIsaCount = int(sizeof kLabels / sizeof kLabels[0]);

#if defined(LSA_NATIVE_X86_DISPATCH)
struct Support {
  bool avx2 = false, avx512 = false;
};

// cpuid leaf 1 (FMA, OSXSAVE, AVX), XCR0 (the OS saves YMM: bits 1-2; opmask and ZMM: bits 5-7),
// cpuid leaf 7 (AVX2; AVX-512 F, DQ, BW, VL: the subsets the AVX-512 tables are compiled with).
Support detect() {
  Support s;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return s;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!(fma && osxsave && avx)) return s;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_state = (xcr0_lo & 0x06u) == 0x06u, zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;
  if (!ymm_state || __get_cpuid_max(0, nullptr) < 7) return s;
  __cpuid_count(7, 0, a, b, c, d);
  s.avx2 = b & (1u << 5);
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  s.avx512 = s.avx2 && zmm_state && f && dq && bw && vl;
  return s;
}

const Support& support() {
  static const Support s = detect();
  return s;
}
bool supports_avx2() { return support().avx2; }
bool supports_avx512() { return support().avx512; }
#endif
bool supports_baseline() { return true; }

// The ISA LSA_NATIVE_CPU_ISA asks for (by label or name), or the last one when it is unset.
int requested() {
  const char* env = std::getenv("LSA_NATIVE_CPU_ISA");
  if (env == nullptr || *env == '\0') return kIsaCount - 1;
  std::string known;
  for (int i = 0; i < kIsaCount; ++i) {
    if (std::strcmp(env, kLabels[i]) == 0 || std::strcmp(env, kNames[i]) == 0) return i;
    known += (i ? ", " : "") + std::string(kLabels[i]);
  }
  detail::require(false, "LSA_NATIVE_CPU_ISA: expected one of " + known + ", got '" + env + "'");
  return 0;
}

}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
#define LSA_NATIVE_ISA_SUPPORTED_(name, label, ...) \
  case Isa::name:                                  \
    return supports_##name();
    LSA_NATIVE_CPU_ISAS(LSA_NATIVE_ISA_SUPPORTED_, ~)
#undef LSA_NATIVE_ISA_SUPPORTED_
  }
  return false;
}

Isa cpu_isa() {
  static const Isa chosen = [] {
    int i = requested();
    while (i > 0 && !isa_supported(static_cast<Isa>(i))) --i;
    return static_cast<Isa>(i);
  }();
  return chosen;
}

const char* isa_label(Isa isa) { return kLabels[static_cast<int>(isa)]; }

}  // namespace cpu

const char* cpu_kernel_isa() { return cpu::isa_label(cpu::cpu_isa()); }

}  // namespace lsa_native
