// Portable 32-byte SIMD vectors (GCC/Clang vector extensions) for the CPU kernels. The same source
// becomes AVX2+FMA code in the -mavx2 translation unit and pairs of SSE2 registers in the baseline
// one, so the kernels' vectorization does not depend on the optimizer level.
#pragma once

#include <cstring>

#include "lsa_native/types.hpp"

namespace lsa_native::cpu::simd {

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

}  // namespace lsa_native::cpu::simd
