// Internal parallel_for: runs fn(task) for task in [0, n_tasks) on num_threads() threads
// (a persistent pool plus the caller).
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "lsa_native/types.hpp"

namespace lsa_native::detail {

// Tasks are handed out dynamically; callers make results independent of which thread ran which
// task (each task writes its own output slot). Exceptions from fn are rethrown on the caller.
// Runs inline when n_tasks == 1, one thread is configured, or another caller holds the pool.
void parallel_for(index_t n_tasks, const std::function<void(index_t)>& fn);

// Prompts per task for batched kernels: fixed, so that chunked reductions (and therefore results)
// do not depend on the thread count.
constexpr index_t kPromptsPerChunk = 128;

inline index_t chunk_count(index_t batch) {
  return (batch + kPromptsPerChunk - 1) / kPromptsPerChunk;
}

// Runs fn(chunk, b0, b1) for every chunk [b0, b1) of kPromptsPerChunk prompts, in parallel.
template <class Fn>
void for_each_chunk(index_t batch, Fn&& fn) {
  parallel_for(chunk_count(batch), [&](index_t c) {
    const index_t b0 = c * kPromptsPerChunk;
    fn(c, b0, std::min(batch, b0 + kPromptsPerChunk));
  });
}

// Sums per-chunk partials [n_chunks, width] in chunk order, so results never depend on the thread
// count.
inline std::vector<double> reduce_partials(const std::vector<double>& partials, index_t width) {
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  const index_t n_chunks = static_cast<index_t>(partials.size()) / width;
  for (index_t c = 0; c < n_chunks; ++c)
    for (index_t i = 0; i < width; ++i) total[i] += partials[c * width + i];
  return total;
}

// One finiteness flag per chunk (written by the chunk's task: no sharing), all set after the call.
struct ChunkFlags {
  std::vector<char> ok;
  explicit ChunkFlags(index_t batch) : ok(static_cast<size_t>(chunk_count(batch)), 1) {}
  bool all() const {
    for (char f : ok)
      if (!f) return false;
    return true;
  }
};

// Runs fn(chunk, b0, b1, partial) for every chunk in parallel, partial [width] being the chunk's
// row of the partial sums (fn writes all of it), and returns them reduced in chunk order.
template <class Fn>
std::vector<double> chunk_sums(index_t batch, index_t width, Fn&& fn) {
  std::vector<double> partials(static_cast<size_t>(chunk_count(batch) * width));
  for_each_chunk(batch, [&](index_t c, index_t b0, index_t b1) {
    fn(c, b0, b1, partials.data() + c * width);
  });
  return reduce_partials(partials, width);
}

}  // namespace lsa_native::detail
