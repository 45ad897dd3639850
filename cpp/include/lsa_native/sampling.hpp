// Native random prompts: counter-based variates (Philox4x32-10), linear-regression prompt samplers
// writing straight into the kernels' layout, and fused sampled LSA training steps.
//
// Every variate is a pure function of (seed, step, prompt index, stream, position) (layout in
// cpp/src/common/philox.hpp and random.hpp), so outputs never depend on the thread count, the
// chunking or the device. All functions run on the CPU over num_threads() threads, are
// thread-safe, and throw lsa_native::Error for invalid arguments. T is float or double; float
// batches draw float variates (they are not the double batch rounded).
#pragma once

#include <cstdint>

#include "lsa_native/device.hpp"
#include "lsa_native/types.hpp"

namespace lsa_native {

// Philox4x32-10 of n counters under the 64-bit seed (key = (low, high) words).
//   counters [n, 4], out [n, 4] (written; may alias counters)
void philox4x32_10(const std::uint32_t* counters, index_t n, std::uint64_t seed, std::uint32_t* out);

// One stream of variates: (seed, step, prompt, stream tag).
struct StreamId {
  std::uint64_t seed = 0;
  std::uint32_t step = 0, prompt = 0, stream = 0;
};

// out[i] = the variate at position start + i of the stream, i < n; start + n <= 2^32 · per-block.
//   out [n] (written)
template <class T>
void random_normals(const StreamId& id, std::uint64_t start, index_t n, T* out);
template <class T>
void random_uniforms(const StreamId& id, std::uint64_t start, index_t n, T* out);
// Gamma(shape, 1) variates number start .. start+n−1 (Marsaglia–Tsang), shape > 0, start + n <= 2^25.
template <class T>
void random_gammas(const StreamId& id, std::uint64_t start, index_t n, T shape, T* out);

// The CPU SIMD math behind the normals (exposed for tests): out = log(x) for positive normal x;
// s = sin(2πu), c = cos(2πu) for u in [0, 1].
template <class T>
void simd_log(const T* x, index_t n, T* out);
template <class T>
void simd_sincos_2pi(const T* u, index_t n, T* s, T* c);

// ---- linear-regression prompts [ZFB 3.3, 4.2, 4.3; CCS H.1] ------------------------------------

// The laws of the per-prompt random diagonal covariance Λ_τ = diag(λ_1..λ_d), λ_k iid [ZFB 4.3]:
// one row each, X(name, check, message, parameter names...), the parameters being
// (a, b, p) = (law_a, law_b, law_p) of LinearPromptSpec in the order named:
//   exponential(scale):   λ = a·Exp(1) (a > 0; JMLR Fig. 1 uses a = c)
//   gamma(shape, scale):  λ = b·Gamma(a) (a > 0, b > 0)
//   uniform(lo, hi):      λ ~ U(a, b) (0 <= a < b)
//   two_point(a, b, p):   λ = a with probability p, else b (a, b >= 0, 0 <= p <= 1)
// The table generates the enum CovarianceLaw (after `fixed`), covariance_laws[] (the names and
// parameter names: the binding's name → law map and lsa_native._core.COVARIANCE_LAWS) and
// validate()'s parameter checks (`check` on doubles a, b, p; Error "covariance_law: <message>").
// A new law also needs its draw (linear::lambda_entry, common/linear_prompts.hpp) and its moments
// and bound (python/lsa_native/covariance_laws.py).
#define LSA_NATIVE_COVARIANCE_LAWS(X)                                                          \
  X(exponential, std::isfinite(a) && a > 0, "exponential scale must be > 0", "scale")          \
  X(gamma, std::isfinite(a) && a > 0 && std::isfinite(b) && b > 0,                             \
    "gamma shape and scale must be > 0", "shape", "scale")                                     \
  X(uniform, std::isfinite(a) && std::isfinite(b) && a >= 0 && a < b,                          \
    "uniform needs 0 <= lo < hi", "lo", "hi")                                                  \
  X(two_point, std::isfinite(a) && std::isfinite(b) && a >= 0 && b >= 0 && p >= 0 && p <= 1,   \
    "two_point needs values >= 0 and 0 <= p <= 1", "a", "b", "p")

enum class CovarianceLaw {
  fixed,  // one Λ for every prompt (LinearPromptSpec::chol, or the identity)
#define LSA_NATIVE_COVARIANCE_LAW_ENUM(name, check, message, ...) name,
  LSA_NATIVE_COVARIANCE_LAWS(LSA_NATIVE_COVARIANCE_LAW_ENUM)
#undef LSA_NATIVE_COVARIANCE_LAW_ENUM
};

// A random law's name and parameter names (at most three: a, b, p; the rest null).
struct CovarianceLawInfo {
  CovarianceLaw law;
  const char* name;
  const char* params[3];
};
inline constexpr CovarianceLawInfo covariance_laws[] = {
#define LSA_NATIVE_COVARIANCE_LAW_INFO(name, check, message, ...) \
  {CovarianceLaw::name, #name, {__VA_ARGS__}},
    LSA_NATIVE_COVARIANCE_LAWS(LSA_NATIVE_COVARIANCE_LAW_INFO)
#undef LSA_NATIVE_COVARIANCE_LAW_INFO
};

// Covariates: x = L z with z ~ N(0, I) (gaussian), or x = L ξ with ξ uniform on the unit sphere
// (sphere; CCS H.1: L ξ has the law of Σ^{1/2} ξ since ξ is rotation invariant).
enum class Covariates { gaussian, sphere };

struct LinearPromptSpec {
  index_t dim = 1;      // d >= 1
  index_t context = 1;  // N >= 1
  std::uint64_t seed = 0;
  const double* chol = nullptr;        // [d, d] lower Cholesky factor L of Λ = L Lᵀ; null: Λ = I
  const double* query_chol = nullptr;  // [d, d] the query's factor (query shift); null: = chol
  double noise_std = 0;                // σ >= 0: y_i = <w, x_i> + σ ε_i
  bool query_noise = false;            // also y_q = <w, x_q> + σ ε_q (off: the noiseless target)
  index_t tasks = 0;                   // κ >= 1: w uniform over κ fixed tasks w_j ~ N(0, I) drawn
                                       // from the seed; 0: a fresh w ~ N(0, I) per prompt
  CovarianceLaw law = CovarianceLaw::fixed;  // not fixed: Λ_τ per prompt (then chol must be null)
  double law_a = 0, law_b = 0, law_p = 0;
  Covariates covariates = Covariates::gaussian;
};

// Throws Error naming the field unless the spec is valid.
void validate(const LinearPromptSpec& spec);

// Outputs of sample_linear_prompts; any may be null (nothing written there).
template <class T>
struct LinearPromptOutputs {
  T* E = nullptr;       // [B, d+1, N+1]  tokens (x_i; y_i), last column (x_q; 0)   [ZFB (3.4)]
  T* y_q = nullptr;     // [B]            query targets
  T* X = nullptr;       // [B, N, d]
  T* y = nullptr;       // [B, N]
  T* w = nullptr;       // [B, d]
  T* x_q = nullptr;     // [B, d]
  T* lambda = nullptr;  // [B, d]         diagonal of Λ_τ (law != fixed; else the diagonal of Λ)
};

// Prompts b = 0..B−1 of training step `step` (prompt index b in the counter).
// device: Device::cpu (num_threads() threads), or Device::cuda: generated on the GPU by the fused
// step's warp generator from the same streams (the outputs device memory of one device, or host
// memory, copied back; with device outputs the call only queues the kernel). The GPU's values
// equal the CPU's up to the rounding of the device's log/sin/cos (the normals) and of FMA
// contraction; the uniform-derived choices (task index, two-point λ) are the same. A prompt must
// fit in the GPU's shared memory (Error naming the shape otherwise: use the CPU).
template <class T>
void sample_linear_prompts(const LinearPromptSpec& spec, index_t batch, std::uint32_t step,
                           const LinearPromptOutputs<T>& out, Device device = Device::cpu);

// Fused sampled step: L = (1/(2B)) Σ_b (ŷ_b − y_q,b)² [ZFB (3.7)] over the prompts of `step` and its
// gradients, without materializing the batch.
//   tokens:  each prompt is generated into a per-thread scratch (the very values
//            sample_linear_prompts writes) and consumed by the LSA loss/gradient kernel.
//   wishart: the prompt enters only through G = A S Aᵀ + e_q e_qᵀ/N (SPEC 3.4a); S is drawn by the
//            Bartlett decomposition and the loss/gradients cost O(d²) per prompt, independent of N.
//            Same law as tokens (not the same draws); needs Gaussian covariates and N >= d (+1 with
//            noise).
//   d_W_pv, d_W_kq [d+1, d+1] (written). Returns L.
// device: Device::cpu (num_threads() threads), or Device::cuda (device.hpp: the parameters and
// gradients may be host memory, copied, or device memory; the prompts are generated on the GPU, from
// the same stream: the CUDA step equals the CPU step up to rounding; the call waits for the result).
// loss (may be null): L is written there instead (one double in the memory of the call's device,
// or host memory) and NaN returned; on the GPU with device outputs the call then waits for nothing.
enum class FusedMethod { tokens, wishart };
template <class T>
double linear_prompts_lsa_loss_and_grad(const LinearPromptSpec& spec, index_t batch,
                                        std::uint32_t step, FusedMethod method, const T* W_pv,
                                        const T* W_kq, T* d_W_pv, T* d_W_kq,
                                        Device device = Device::cpu, double* loss = nullptr);

}  // namespace lsa_native
