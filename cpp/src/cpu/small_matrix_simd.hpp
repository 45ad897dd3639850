// The SIMD register tiles of the small-matrix kit, for the per-ISA translation units (like simd.hpp,
// everything here has internal linkage: each ISA's unit keeps its own copy). Two products:
// - multiply_*: C = A B of small matrices (broadcast A, rows of B as vectors), used by the LSA
//   full-output kernels on padded matrices (lsa_kernels.inl) and the dense population products
//   (small_matrix_kernels.inl);
// - the token-axis kit of LSA (lsa_kernels.inl, multihead_kernels.inl) and kernel attention
//   (kernel_attention_kernels.inl), whose rows run along the tokens (the contiguous axis):
//   token_products, C = scale · A Bᵀ (dot products over the tokens), and combine_rows,
//   out = base + coef · src (rows of tokens combined).
// The LSA_HD scalar kit is common/small_matrix.hpp.
#pragma once

#include <algorithm>
#include <type_traits>

#include "cpu/simd.hpp"

namespace lsa_native::cpu::small {
namespace {

// C[i0:i0+RI, c0:c0+L·NC] (+)= A[i0:i0+RI, :k] B[:k, c0:c0+L·NC] for row-major A, B, C with
// leading dimensions lda, ldb, ldc: RI·NC vector accumulators (12 independent FMA chains for 4 x 3,
// so the k-loop is throughput- rather than latency-bound), each B load used RI times.
template <class S, int RI, int NC>
inline void multiply_tile(const S* A, index_t lda, const S* B, index_t ldb, S* C, index_t ldc,
                          index_t k, index_t i0, index_t c0, bool accumulate) {
  constexpr index_t L = simd::kLanes<S>;
  simd::Vec<S> acc[RI][NC];
  for (int i = 0; i < RI; ++i)
    for (int v = 0; v < NC; ++v)
      acc[i][v] = accumulate ? simd::load(C + (i0 + i) * ldc + c0 + v * L) : simd::zero<S>();
  for (index_t m = 0; m < k; ++m) {
    simd::Vec<S> b[NC];
    for (int v = 0; v < NC; ++v) b[v] = simd::load(B + m * ldb + c0 + v * L);
    for (int i = 0; i < RI; ++i) {
      const simd::Vec<S> a = simd::broadcast(A[(i0 + i) * lda + m]);
      for (int v = 0; v < NC; ++v) acc[i][v] += a * b[v];
    }
  }
  for (int i = 0; i < RI; ++i)
    for (int v = 0; v < NC; ++v) simd::store(C + (i0 + i) * ldc + c0 + v * L, acc[i][v]);
}

// Rows [0, n) x the column vectors [c0, c0 + nc·L), nc in 1..3: tiles of 4 rows, then single rows.
template <class S>
inline void multiply_columns(const S* A, index_t lda, const S* B, index_t ldb, S* C, index_t ldc,
                             index_t n, index_t k, index_t c0, index_t nc, bool accumulate) {
  auto rows = [&](auto ri_tag, index_t i0) {
    constexpr int RI = decltype(ri_tag)::value;
    if (nc == 3) multiply_tile<S, RI, 3>(A, lda, B, ldb, C, ldc, k, i0, c0, accumulate);
    else if (nc == 2) multiply_tile<S, RI, 2>(A, lda, B, ldb, C, ldc, k, i0, c0, accumulate);
    else multiply_tile<S, RI, 1>(A, lda, B, ldb, C, ldc, k, i0, c0, accumulate);
  };
  index_t i = 0;
  for (; i + 4 <= n; i += 4) rows(std::integral_constant<int, 4>{}, i);
  for (; i < n; ++i) rows(std::integral_constant<int, 1>{}, i);
}

// C (+)= A B for n x n matrices stored [n, ld] with ld a multiple of the lanes and zero padding
// columns (the padding of C stays zero). C aliases neither A nor B.
template <class S>
void multiply_padded(const S* A, const S* B, S* C, index_t n, index_t ld, bool accumulate) {
  constexpr index_t L = simd::kLanes<S>;
  for (index_t c0 = 0; c0 < ld; c0 += 3 * L)
    multiply_columns(A, ld, B, ld, C, ld, n, n, c0, std::min<index_t>(3, (ld - c0) / L), accumulate);
}

// C = A B for dense row-major A [rows, n], B [n, n], C [rows, n] (no padding): whole column vectors
// by tiles, the last n mod L columns by plain loops. C aliases neither A nor B. rows = n is the
// matrix product, rows = 1 the product xᵀ B of a row vector.
template <class S>
void multiply_dense(const S* A, const S* B, S* C, index_t rows, index_t n) {
  constexpr index_t L = simd::kLanes<S>;
  const index_t n_vec = n / L * L;
  for (index_t c0 = 0; c0 < n_vec; c0 += 3 * L)
    multiply_columns(A, n, B, n, C, n, rows, n, c0, std::min<index_t>(3, (n_vec - c0) / L), false);
  for (index_t i = 0; i < rows; ++i) {
    for (index_t j = n_vec; j < n; ++j) C[i * n + j] = S(0);
    for (index_t m = 0; m < n; ++m) {
      const S a = A[i * n + m];
      for (index_t j = n_vec; j < n; ++j) C[i * n + j] += a * B[m * n + j];
    }
  }
}

// C [m, n] = A [m, k] B [k, n] (row-major with leading dimensions; C aliases neither): whole
// column vectors by the tiles above, the last n mod L columns by plain dot products.
template <class S>
void multiply_strided(const S* A, index_t lda, const S* B, index_t ldb, S* C, index_t ldc, index_t m,
                      index_t k, index_t n) {
  constexpr index_t L = simd::kLanes<S>;
  const index_t n_vec = n / L * L;
  for (index_t c0 = 0; c0 < n_vec; c0 += 3 * L)
    multiply_columns(A, lda, B, ldb, C, ldc, m, k, c0, std::min<index_t>(3, (n_vec - c0) / L), false);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = n_vec; j < n; ++j) {
      S acc = 0;
      for (index_t q = 0; q < k; ++q) acc += A[i * lda + q] * B[q * ldb + j];
      C[i * ldc + j] = acc;
    }
}

// y = A x for dense row-major A [rows, n] (y != x): 4 rows at a time, vector partial sums along
// the row (each x load used 4 times), the last n mod L entries by plain loops.
template <class S>
void matvec_rows(const S* A, const S* x, S* y, index_t rows, index_t n) {
  constexpr index_t L = simd::kLanes<S>;
  const index_t n_vec = n / L * L;
  auto block = [&](auto ri_tag, index_t i0) {
    constexpr int RI = decltype(ri_tag)::value;
    simd::Vec<S> acc[RI];
    for (int i = 0; i < RI; ++i) acc[i] = simd::zero<S>();
    for (index_t j = 0; j < n_vec; j += L) {
      const simd::Vec<S> xv = simd::load(x + j);
      for (int i = 0; i < RI; ++i) acc[i] += simd::load(A + (i0 + i) * n + j) * xv;
    }
    for (int i = 0; i < RI; ++i) {
      S sum = simd::hsum(acc[i]);
      for (index_t j = n_vec; j < n; ++j) sum += A[(i0 + i) * n + j] * x[j];
      y[i0 + i] = sum;
    }
  };
  index_t i = 0;
  for (; i + 4 <= rows; i += 4) block(std::integral_constant<int, 4>{}, i);
  for (; i < rows; ++i) block(std::integral_constant<int, 1>{}, i);
}

// y = A x for dense row-major n x n A (y != x).
template <class S>
void matvec_dense(const S* A, const S* x, S* y, index_t n) {
  matvec_rows(A, x, y, n, n);
}


// ---------------------------------------------------------------------------------------------
// Token-axis products. Rows run along the tokens, `len` a multiple of the lanes (rows padded with
// zeros). A register tile of RA rows of A x RB rows of B keeps RA·RB = 8 dot products in vector
// accumulators (8 independent FMA chains cover the FMA latency of two FMA pipes) and reduces them
// together, lanes at a time, with simd::hsum_lanes: one log2(lanes)-deep shuffle tree per `lanes`
// entries instead of one per entry, which at the short rows of these models (32 tokens: 4 FMAs per
// entry) would cost as much as the products. With RB = lanes each reduced group is a row segment
// of C, stored as one vector. A tile at the edge repeats its last row of A or B and drops the
// extra entries.

// The tile at rows i0 of A and j0 of B, whose RB rows of B are b[0..RB).
template <class S, int RA, int RB>
inline void token_tile(const S* A, index_t lda, index_t ra, index_t i0, const S* const* b,
                       index_t rb, index_t j0, index_t len, S scale, S* C, index_t ldc) {
  constexpr index_t L = simd::kLanes<S>;
  constexpr int K = RA * RB;
  static_assert(K % L == 0, "a tile reduces whole groups of lanes");
  const S* a[RA];
  for (int i = 0; i < RA; ++i) a[i] = A + std::min<index_t>(i0 + i, ra - 1) * lda;
  simd::Vec<S> acc[K];
  for (int x = 0; x < K; ++x) acc[x] = simd::zero<S>();
  for (index_t c = 0; c < len; c += L) {
    simd::Vec<S> bv[RB];
    for (int k = 0; k < RB; ++k) bv[k] = simd::load(b[k] + c);
    for (int i = 0; i < RA; ++i) {
      const simd::Vec<S> av = simd::load(a[i] + c);
      for (int k = 0; k < RB; ++k) acc[i * RB + k] += av * bv[k];
    }
  }
  simd::Vec<S> sums[K / L];
  for (int g = 0; g < K / L; ++g) sums[g] = scale * simd::hsum_lanes(acc + g * L);
  const index_t ni = std::min<index_t>(RA, ra - i0), nk = std::min<index_t>(RB, rb - j0);
  if (RB == L && nk == L) {  // whole row segments of C
    for (index_t i = 0; i < ni; ++i) simd::store(C + (i0 + i) * ldc + j0, sums[i]);
    return;
  }
  for (index_t i = 0; i < ni; ++i)
    for (index_t k = 0; k < nk; ++k) C[(i0 + i) * ldc + j0 + k] = sums[(i * RB + k) / L][(i * RB + k) % L];
}

// C[i, j] = scale · Σ_c A[i·lda + c] B[j·ldb + c] (c < len) for i < ra, j < rb; C [ra, ldc].
// Tiles of (8 / lanes) x lanes (rb >= 4: 1 x 8 in float, 2 x 4 in double), 4 x 2 (rb = 2, 3) or
// 8 x 1 (a matrix–vector product). With `symmetric` (A == B, ra == rb) only the tiles touching the
// upper triangle run, then the lower triangle is mirrored (bitwise the same values: the same
// products in the same order).
template <class S>
void token_products(const S* A, index_t lda, index_t ra, const S* B, index_t ldb, index_t rb,
                    index_t len, S scale, S* C, index_t ldc, bool symmetric = false) {
  constexpr int L = int(simd::kLanes<S>);
  auto sweep = [&](auto ra_tag, auto rb_tag) {
    constexpr int RA = decltype(ra_tag)::value, RB = decltype(rb_tag)::value;
    for (index_t j0 = 0; j0 < rb; j0 += RB) {
      const S* b[RB];  // the block's rows of B, found once for all its tiles
      for (int k = 0; k < RB; ++k) b[k] = B + std::min<index_t>(j0 + k, rb - 1) * ldb;
      const index_t i_end = symmetric ? std::min(ra, j0 + RB) : ra;  // tiles touching j >= i
      for (index_t i0 = 0; i0 < i_end; i0 += RA)
        token_tile<S, RA, RB>(A, lda, ra, i0, b, rb, j0, len, scale, C, ldc);
    }
  };
  using std::integral_constant;
  if (rb >= 4) sweep(integral_constant<int, 8 / L>{}, integral_constant<int, L>{});
  else if (rb >= 2) sweep(integral_constant<int, 4>{}, integral_constant<int, 2>{});
  else sweep(integral_constant<int, 8>{}, integral_constant<int, 1>{});
  if (symmetric)
    for (index_t r = 0; r < ra; ++r)
      for (index_t c = 0; c < r; ++c) C[r * ldc + c] = C[c * ldc + r];
}

// out[r, :] = base[r, :] (0 without base) + Σ_{k < count} coef[r·crs + k·cks] · src[k·lds + :] for
// RO rows from r0 and NC vector chunks from chunk c0: RO·NC accumulators (12 FMA chains for 3 x 4),
// each src load used RO times. Per entry the same operations in the same order as a plain loop.
template <class S, int RO, int NC>
inline void combine_tile(S* out, index_t ldo, const S* base, const S* coef, index_t crs,
                         index_t cks, const S* src, index_t lds, index_t count, index_t r0,
                         index_t c0) {
  constexpr index_t L = simd::kLanes<S>;
  simd::Vec<S> acc[RO][NC];
  for (int i = 0; i < RO; ++i)
    for (int v = 0; v < NC; ++v)
      acc[i][v] = base ? simd::load(base + (r0 + i) * ldo + c0 + v * L) : simd::zero<S>();
  for (index_t k = 0; k < count; ++k) {
    simd::Vec<S> c[RO];
    for (int i = 0; i < RO; ++i) c[i] = simd::broadcast(coef[(r0 + i) * crs + k * cks]);
    for (int v = 0; v < NC; ++v) {
      const simd::Vec<S> x = simd::load(src + k * lds + c0 + v * L);
      for (int i = 0; i < RO; ++i) acc[i][v] += c[i] * x;
    }
  }
  for (int i = 0; i < RO; ++i)
    for (int v = 0; v < NC; ++v) simd::store(out + (r0 + i) * ldo + c0 + v * L, acc[i][v]);
}

// out = base + coef · src on rows of `len` tokens (a multiple of the lanes): out and base [rows,
// ldo], src [count, lds], coefficient (r, k) at coef[r·crs + k·cks] (so a transposed or strided
// coefficient matrix needs no copy). base null: out = coef · src; base == out accumulates. out
// aliases neither src nor coef. Tiles of 3 rows x 4 chunks (12 accumulators, 7 loads per 12 FMAs),
// then the row and chunk tails.
template <class S>
void combine_rows(S* out, index_t ldo, const S* base, const S* coef, index_t crs, index_t cks,
                  const S* src, index_t lds, index_t rows, index_t count, index_t len) {
  const index_t chunks = len / simd::kLanes<S>;
  auto row_block = [&](auto ro_tag, index_t r0) {
    constexpr int RO = decltype(ro_tag)::value;
    index_t c = 0;
    for (; c + 4 <= chunks; c += 4)
      combine_tile<S, RO, 4>(out, ldo, base, coef, crs, cks, src, lds, count, r0, c * simd::kLanes<S>);
    for (; c < chunks; ++c)
      combine_tile<S, RO, 1>(out, ldo, base, coef, crs, cks, src, lds, count, r0, c * simd::kLanes<S>);
  };
  using std::integral_constant;
  index_t r = 0;
  for (; r + 3 <= rows; r += 3) row_block(integral_constant<int, 3>{}, r);
  if (rows - r == 2) row_block(integral_constant<int, 2>{}, r);
  else if (rows - r == 1) row_block(integral_constant<int, 1>{}, r);
}

}  // namespace
}  // namespace lsa_native::cpu::small
