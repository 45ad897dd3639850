// Portable 32-byte SIMD vectors (GCC/Clang vector extensions) for the CPU kernels. The same source
// becomes AVX2+FMA code in the -mavx2 translation units and pairs of SSE2 registers in the
// baseline ones, so the kernels' vectorization does not depend on the optimizer level.
// Everything here has internal linkage (anonymous namespace): each ISA's translation unit keeps its
// own copy, so the linker can never merge an AVX2 body into the baseline code.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "lsa_native/types.hpp"

namespace lsa_native::cpu::simd {
namespace {

template <class T>
struct VecTraits;
template <>
struct VecTraits<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct VecTraits<double> {
  typedef double type __attribute__((vector_size(32)));
};

template <class T>
using Vec = typename VecTraits<T>::type;
template <class T>
constexpr index_t kLanes = index_t(32 / sizeof(T));

// std::vector with a per-unit allocator: the allocator has internal linkage (anonymous namespace),
// so every instantiation of UnitVector<T> does too. A plain std::vector<T> member function that
// an ISA unit emits out of line (e.g. _M_default_append) is one weak symbol shared with every other
// unit, and the linker may keep the AVX-512 unit's copy for the baseline code. Use UnitVector in
// the kernel tables (cmake/CheckIsaSymbols.cmake, a ctest, finds any such shared symbol).
template <class T>
struct UnitAllocator {
  using value_type = T;
  UnitAllocator() = default;
  template <class U>
  constexpr UnitAllocator(const UnitAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return std::allocator<T>{}.allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>{}.deallocate(p, n); }
  friend constexpr bool operator==(UnitAllocator, UnitAllocator) noexcept { return true; }
  friend constexpr bool operator!=(UnitAllocator, UnitAllocator) noexcept { return false; }
};
template <class T>
using UnitVector = std::vector<T, UnitAllocator<T>>;

// n zeroed Vec<T> on the heap, aligned to the vector's size. Never std::vector<Vec<T>>: a
// translation unit without AVX gives the 32-byte vector type 16-byte alignment, and
// std::vector<Vec<T>>'s inline code is one symbol shared by every ISA's unit (the linker keeps one
// copy), so an AVX unit can receive a 16-byte-aligned buffer and fault on an aligned store. This
// class has internal linkage (anonymous namespace): each unit keeps its own.
template <class T>
class VecBuffer {
 public:
  explicit VecBuffer(index_t n = 0) : raw_(static_cast<std::size_t>((n + 1) * kLanes<T>)) {}
  VecBuffer(const VecBuffer&) = delete;  // a copy's alignment offset could differ
  VecBuffer& operator=(const VecBuffer&) = delete;
  VecBuffer(VecBuffer&&) = default;  // moves keep the heap block, hence the offset
  VecBuffer& operator=(VecBuffer&&) = default;
  Vec<T>* data() {
    const auto p = reinterpret_cast<std::uintptr_t>(raw_.data());
    return reinterpret_cast<Vec<T>*>((p + sizeof(Vec<T>) - 1) & ~(sizeof(Vec<T>) - 1));
  }
  const Vec<T>* data() const { return const_cast<VecBuffer*>(this)->data(); }
  Vec<T>& operator[](std::size_t i) { return data()[i]; }
  const Vec<T>& operator[](std::size_t i) const { return data()[i]; }

 private:
  UnitVector<T> raw_;
};

template <class T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
template <class T>
inline void store(T* p, Vec<T> v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
inline Vec<T> zero() {
  return Vec<T>{};
}
template <class T>
inline Vec<T> broadcast(T x) {
  return Vec<T>{} + x;
}
// Sum of the lanes as a log2(lanes)-deep tree of shuffles and adds.
inline float hsum(Vec<float> v) {
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
  return v[0];
}
inline double hsum(Vec<double> v) {
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2);
  return v[0];
}

// Lane sums of kLanes vectors at once: out[i] = hsum(v[i]) via log2(lanes) levels of pairwise
// shuffle-and-add (7 adds for 8 float vectors instead of 8 separate reductions).
inline Vec<float> hsum_lanes(const Vec<float> v[8]) {
  Vec<float> t[4], u[2];
  for (int i = 0; i < 4; ++i)
    t[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(v[2 * i], v[2 * i + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  for (int i = 0; i < 2; ++i)
    u[i] = __builtin_shufflevector(t[2 * i], t[2 * i + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(t[2 * i], t[2 * i + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  return __builtin_shufflevector(u[0], u[1], 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(u[0], u[1], 4, 5, 6, 7, 12, 13, 14, 15);
}
inline Vec<double> hsum_lanes(const Vec<double> v[4]) {
  Vec<double> t[2];
  for (int i = 0; i < 2; ++i)
    t[i] = __builtin_shufflevector(v[2 * i], v[2 * i + 1], 0, 4, 2, 6) +
           __builtin_shufflevector(v[2 * i], v[2 * i + 1], 1, 5, 3, 7);
  return __builtin_shufflevector(t[0], t[1], 0, 1, 4, 5) + __builtin_shufflevector(t[0], t[1], 2, 3, 6, 7);
}

// In-place transpose of a kLanes x kLanes block held as kLanes vectors: afterwards v[j][i] is the
// old v[i][j]. log2(lanes) levels of two-vector shuffles (24 for 8 floats, 8 for 4 doubles): how
// the prompts-in-lanes kernels turn L prompts' rows into vectors whose lane l is prompt l.
inline void transpose(Vec<float> v[8]) {
  Vec<float> t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(v[i], v[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(v[i], v[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)
    for (int k = 0; k < 2; ++k) {
      u[i + 2 * k] = __builtin_shufflevector(t[i + k], t[i + k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * k + 1] = __builtin_shufflevector(t[i + k], t[i + k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int k = 0; k < 4; ++k) {
    v[k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    v[k + 4] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}
inline void transpose(Vec<double> v[4]) {
  Vec<double> t[4];
  for (int i = 0; i < 4; i += 2) {
    t[i] = __builtin_shufflevector(v[i], v[i + 1], 0, 4, 2, 6);
    t[i + 1] = __builtin_shufflevector(v[i], v[i + 1], 1, 5, 3, 7);
  }
  for (int k = 0; k < 2; ++k) {
    v[k] = __builtin_shufflevector(t[k], t[k + 2], 0, 1, 4, 5);
    v[k + 2] = __builtin_shufflevector(t[k], t[k + 2], 2, 3, 6, 7);
  }
}

// The lanes of a vector in double: kLanes<T> / kLanes<double> vectors (lane order kept).
inline void to_double(Vec<double> x, Vec<double>* out) { out[0] = x; }
inline void to_double(Vec<float> x, Vec<double>* out) {
  typedef float F4 __attribute__((vector_size(16)));
  out[0] = __builtin_convertvector(F4(__builtin_shufflevector(x, x, 0, 1, 2, 3)), Vec<double>);
  out[1] = __builtin_convertvector(F4(__builtin_shufflevector(x, x, 4, 5, 6, 7)), Vec<double>);
}

typedef std::int64_t I64x4 __attribute__((vector_size(32)));
typedef std::int32_t I32x8 __attribute__((vector_size(32)));
// Unsigned lanes for exponent-bit arithmetic that may wrap in lanes masked out afterwards (out of
// range or NaN inputs): wrapping is defined for unsigned, undefined behaviour for signed lanes.
typedef std::uint64_t U64x4 __attribute__((vector_size(32)));
typedef std::uint32_t U32x8 __attribute__((vector_size(32)));

// exp on a whole vector: Cody–Waite reduction x = k ln2 + r (|r| <= ln2/2, k by the 1.5·2^52
// rounding trick), Taylor polynomial of r (degree 12: relative truncation < 2e-16), and 2^k built
// in the exponent bits. Accurate to a few ulp; overflow gives +inf, results below the smallest
// normal number flush to 0. Vectorizes where a call to std::exp cannot. A NaN needs no test of its
// own: it makes r, hence the polynomial, NaN, and neither range test below selects it.
// kMayOverflow = false drops the overflow test where every x is ≤ 0 or NaN (a softmax's values
// minus their max); the results are the same bits.
template <bool kMayOverflow = true>
inline Vec<double> exp(Vec<double> x) {
  const Vec<double> magic = broadcast(6755399441055744.0);  // 1.5 · 2^52
  const Vec<double> t = x * 1.4426950408889634 + magic;
  const Vec<double> k = t - magic;
  Vec<double> r = x - k * 0.6931471803691238;  // ln2 high part (exact product with k)
  r = r - k * 1.9082149292705877e-10;          // ln2 low part
  Vec<double> p = broadcast(1.0 / 479001600.0);
  const double inv_fact[12] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320,
                               1.0 / 5040,     1.0 / 720,     1.0 / 120,    1.0 / 24,
                               1.0 / 6,        0.5,           1.0,          1.0};
  for (double c : inv_fact) p = p * r + c;
  U64x4 tb, mb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&mb, &magic, sizeof mb);
  const U64x4 bits = (tb - mb + 1023) << 52;  // k + bias in the exponent field (mod 2^64)
  Vec<double> scale;
  std::memcpy(&scale, &bits, sizeof scale);
  Vec<double> out = p * scale;
  if constexpr (kMayOverflow) out = x > 709.782712893384 ? broadcast(std::numeric_limits<double>::infinity()) : out;
  return x < -708.3964185322641 ? zero<double>() : out;
}

// Single-precision version: degree-7 Taylor (relative truncation < 6e-9).
template <bool kMayOverflow = true>
inline Vec<float> exp(Vec<float> x) {
  const Vec<float> magic = broadcast(12582912.0f);  // 1.5 · 2^23
  const Vec<float> t = x * 1.44269504f + magic;
  const Vec<float> k = t - magic;
  Vec<float> r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  Vec<float> p = broadcast(1.0f / 5040);
  const float inv_fact[7] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  for (float c : inv_fact) p = p * r + c;
  U32x8 tb, mb;
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&mb, &magic, sizeof mb);
  const U32x8 bits = (tb - mb + 127) << 23;  // k + bias in the exponent field (mod 2^32)
  Vec<float> scale;
  std::memcpy(&scale, &bits, sizeof scale);
  Vec<float> out = p * scale;
  if constexpr (kMayOverflow) out = x > 88.7228317f ? broadcast(std::numeric_limits<float>::infinity()) : out;
  return x < -87.3365448f ? zero<float>() : out;
}

// x[i] = exp(x[i]) for n values (the tail through a zero-padded vector).
template <class T>
inline void exp_inplace(T* x, index_t n) {
  constexpr index_t L = kLanes<T>;
  index_t i = 0;
  for (; i + L <= n; i += L) store(x + i, exp(load(x + i)));
  if (i < n) {
    T buf[L] = {};
    for (index_t k = i; k < n; ++k) buf[k - i] = x[k];
    store(buf, exp(load(buf)));
    for (index_t k = i; k < n; ++k) x[k] = buf[k - i];
  }
}

}  // namespace
}  // namespace lsa_native::cpu::simd
