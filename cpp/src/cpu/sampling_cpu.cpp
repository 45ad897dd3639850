// CPU samplers (cpu/sampling_cpu.hpp): ISA dispatch, chunking over threads and the fused steps. The
// arguments arrive validated by the sampling dispatcher (sampling_dispatch.cpp).
#include "cpu/sampling_cpu.hpp"

#include <algorithm>
#include <vector>

#include "common/parallel.hpp"
#include "common/philox.hpp"
#include "cpu/isa.hpp"
#include "cpu/lsa_kernels.hpp"
#include "cpu/sampling_kernels.hpp"

namespace lsa_native::cpu {
namespace {

template <class T>
const cpu::SamplingKernels<T>& sampling() {
  return LSA_NATIVE_SELECT_KERNELS(cpu::SamplingKernels<T>, sampling_kernels<T>());
}

template <class T>
const cpu::LsaKernels<T>& lsa() {
  return LSA_NATIVE_SELECT_KERNELS(cpu::LsaKernels<T>, lsa_kernels<T>());
}

rng::StreamAddress address(const StreamId& id) {
  return {rng::philox_key(id.seed), id.prompt, id.step, id.stream};
}

// Prompts generated per call of the LSA kernel in the fused tokens step: 8 (the LSA kernel's
// prompts-in-lanes width), or up to 32 while they fit in kFusedBytes (small prompts: the kernel's
// per-call setup then runs once per 32 prompts; d = 5, N = 20: 1.79 -> 1.56 ms a step at B = 4096
// on Zen 3, while at d = 20, N = 100 chunks of 1, 2, 8 or 32 prompts measured 5.8, 5.8, 4.8 and
// 4.7 ms: fewer than 8 starve the kernel's prefetch, more gain nothing).
constexpr index_t kFusedBytes = 16384;
template <class T>
index_t fused_prompts(index_t d, index_t N) {
  const index_t fit = kFusedBytes / (index_t(sizeof(T)) * (d + 1) * (N + 1));
  return std::max<index_t>(8, std::min<index_t>(32, fit / 8 * 8));
}

// The fused step's per-chunk partial sums [width] of prompts [b0, b1), tokens method:
// fused_prompts at a time generated in cache and consumed by the LSA kernel.
template <class T>
void tokens_partial(const linear::Law<T>& P, const T* W_pv, const T* W_kq, index_t b0, index_t b1,
                    index_t width, double* acc) {
  const index_t d = P.d, N = P.N, rows = d + 1, cols = N + 1, chunk = fused_prompts<T>(d, N);
  const auto& k = sampling<T>();
  const auto& l = lsa<T>();
  std::vector<T> E(static_cast<size_t>(chunk * rows * cols)), y_q(static_cast<size_t>(chunk));
  std::vector<double> part(static_cast<size_t>(width));
  for (index_t i = 0; i < width; ++i) acc[i] = 0;
  for (index_t s0 = b0; s0 < b1; s0 += chunk) {
    const index_t s1 = std::min(b1, s0 + chunk), m = s1 - s0;
    LinearPromptOutputs<T> o;
    o.E = E.data();
    o.y_q = y_q.data();
    k.linear_prompts(P, s0, s1, o);
    l.loss_grad(LsaShape{m, d, N}, E.data(), y_q.data(), W_pv, W_kq, nullptr, 0, m, part.data());
    for (index_t i = 0; i < width; ++i) acc[i] += part[i];
  }
}

}  // namespace

void philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed, std::uint32_t* out) {
  const rng::PhiloxKey key = rng::philox_key(seed);
  for (index_t i = 0; i < n; ++i) {
    std::uint32_t c[4] = {counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]};
    rng::philox4x32_10(c, key.k0, key.k1);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = c[j];
  }
}

template <class T>
void random_normals(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  const auto& k = sampling<T>();
  const rng::StreamAddress a = address(id);
  // Ranges of 4096 normals per task; each is a pure function of its positions.
  constexpr index_t kPer = 4096;
  detail::parallel_for((n + kPer - 1) / kPer, [&](index_t t) {
    const index_t i0 = t * kPer, m = std::min(kPer, n - i0);
    k.normals(a, start + std::uint64_t(i0), m, out + i0);
  });
}

template <class T>
void random_uniforms(const StreamId& id, std::uint64_t start, index_t n, T* out) {
  const auto& k = sampling<T>();
  const rng::StreamAddress a = address(id);
  constexpr index_t kPer = 4096;  // as random_normals: each range a pure function of its positions
  detail::parallel_for((n + kPer - 1) / kPer, [&](index_t t) {
    const index_t i0 = t * kPer, m = std::min(kPer, n - i0);
    k.uniforms(a, start + std::uint64_t(i0), m, out + i0);
  });
}

template <class T>
void random_gammas(const StreamId& id, std::uint64_t start, index_t n, T shape, T* out) {
  const auto& k = sampling<T>();
  const rng::StreamAddress a = address(id);
  constexpr index_t kPer = 4096;  // as random_normals: each range a pure function of its positions
  detail::parallel_for((n + kPer - 1) / kPer, [&](index_t t) {
    const index_t i0 = t * kPer, m = std::min(kPer, n - i0);
    k.gammas(a, static_cast<std::uint32_t>(start + std::uint64_t(i0)), m, shape, out + i0);
  });
}

template <class T>
void simd_log(const T* x, index_t n, T* out) {
  sampling<T>().log(x, n, out);
}
template <class T>
void simd_sincos_2pi(const T* u, index_t n, T* s, T* c) {
  sampling<T>().sincos_2pi(u, n, s, c);
}

template <class T>
void sample_linear_prompts(const linear::Law<T>& P, index_t batch, const LinearPromptOutputs<T>& out) {
  const auto& k = sampling<T>();
  const index_t d = P.d, N = P.N;
  detail::for_each_chunk(batch, [&](index_t, index_t b0, index_t b1) {
    LinearPromptOutputs<T> o;
    auto at = [b0](T* base, index_t stride) { return base ? base + b0 * stride : nullptr; };
    o.E = at(out.E, (d + 1) * (N + 1));
    o.y_q = at(out.y_q, 1);
    o.X = at(out.X, N * d);
    o.y = at(out.y, N);
    o.w = at(out.w, d);
    o.x_q = at(out.x_q, d);
    o.lambda = at(out.lambda, d);
    k.linear_prompts(P, b0, b1, o);
  });
}

template <class T>
double linear_prompts_lsa_loss_and_grad(const linear::Law<T>& P, index_t batch, FusedMethod method,
                                        const T* W_pv, const T* W_kq, T* d_W_pv, T* d_W_kq) {
  const index_t d = P.d, width = loss_grad_partial_size(d);
  std::vector<double> partials(static_cast<size_t>(detail::chunk_count(batch) * width));
  if (method == FusedMethod::wishart) {
    const auto& k = sampling<T>();
    detail::for_each_chunk(batch, [&](index_t c, index_t b0, index_t b1) {
      k.wishart_loss_grad(P, W_pv, W_kq, b0, b1, partials.data() + c * width);
    });
  } else {
    detail::for_each_chunk(batch, [&](index_t c, index_t b0, index_t b1) {
      tokens_partial(P, W_pv, W_kq, b0, b1, width, partials.data() + c * width);
    });
  }
  const std::vector<double> total = detail::reduce_partials(partials, width);
  return finish_loss_and_grad(total.data(), d, batch, d_W_pv, d_W_kq);
}

#define LSA_NATIVE_INSTANTIATE(T)                                                                  \
  template void random_normals<T>(const StreamId&, std::uint64_t, index_t, T*);                   \
  template void random_uniforms<T>(const StreamId&, std::uint64_t, index_t, T*);                  \
  template void random_gammas<T>(const StreamId&, std::uint64_t, index_t, T, T*);                 \
  template void simd_log<T>(const T*, index_t, T*);                                               \
  template void simd_sincos_2pi<T>(const T*, index_t, T*, T*);                                    \
  template void sample_linear_prompts<T>(const linear::Law<T>&, index_t,                          \
                                         const LinearPromptOutputs<T>&);                          \
  template double linear_prompts_lsa_loss_and_grad<T>(const linear::Law<T>&, index_t,             \
                                                      FusedMethod, const T*, const T*, T*, T*);
LSA_NATIVE_INSTANTIATE(float)
LSA_NATIVE_INSTANTIATE(double)
#undef LSA_NATIVE_INSTANTIATE

}  // namespace lsa_native::cpu
