// Internal parallel_for: runs fn(task) for task in [0, n_tasks) on num_threads() threads
// (a persistent pool plus the caller).
#pragma once

#include <functional>

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

}  // namespace lsa_native::detail
