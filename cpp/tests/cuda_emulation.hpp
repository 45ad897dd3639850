// A small CUDA execution-model emulator for CPU tests of the kernels in cpp/src/cuda/*.cuh: every
// thread of a block is a host thread; __syncthreads / __syncwarp are barriers; warp shuffles go
// through a per-warp exchange buffer; shared memory is one buffer per block. Blocks run one after
// the other. It checks indexing, layouts and the order of the reductions (not performance, and
// not every data race: compute-sanitizer's racecheck does that on a GPU).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define LSA_UNROLL
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define LSA_DYNAMIC_SHARED(name) unsigned char* name = ::lsa_emu::dynamic_shared()
#define LSA_STATIC_SHARED(type, name, n) type* name = ::lsa_emu::static_shared<type>(n)

namespace lsa_emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// Reusable barrier for a fixed number of threads (C++17: no std::barrier).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    const unsigned long gen = generation_;
    if (++count_ == n_) {
      count_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0;
  unsigned long generation_ = 0;
};

struct Block {
  std::vector<unsigned char> dynamic_smem, static_smem;
  std::unique_ptr<Barrier> block_barrier;
  std::vector<std::unique_ptr<Barrier>> warp_barriers;
  std::vector<std::vector<unsigned char>> exchange;  // per warp: 32 lanes x 8 bytes
};

struct ThreadState {
  Block* block = nullptr;
  Dim3 thread_idx, block_idx, block_dim, grid_dim;
  std::size_t static_offset = 0;
};
inline thread_local ThreadState self;

inline unsigned char* dynamic_shared() { return self.block->dynamic_smem.data(); }

// Static __shared__ arrays: every thread declares them in the same order, so the per-thread cursor
// gives every thread of the block the same address.
template <class T>
T* static_shared(std::size_t n) {
  const std::size_t at = (self.static_offset + alignof(T) - 1) / alignof(T) * alignof(T);
  self.static_offset = at + sizeof(T) * n;
  return reinterpret_cast<T*>(self.block->static_smem.data() + at);
}

// Runs kernel(args...) on grid x block threads (1-d), `smem` bytes of dynamic shared memory.
template <class Kernel, class... Args>
void launch(unsigned grid, unsigned threads, std::size_t smem, Kernel kernel, Args... args) {
  for (unsigned b = 0; b < grid; ++b) {
    Block block;
    block.dynamic_smem.resize(smem + 16, 0xCD);  // garbage-filled, as on a GPU
    block.static_smem.resize(1 << 16, 0xCD);
    block.block_barrier = std::make_unique<Barrier>(int(threads));
    const unsigned warps = (threads + 31) / 32;
    for (unsigned w = 0; w < warps; ++w) {
      block.warp_barriers.push_back(std::make_unique<Barrier>(int(std::min(32u, threads - 32 * w))));
      block.exchange.emplace_back(32 * 8);
    }
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        self = ThreadState{&block, {t, 0, 0}, {b, 0, 0}, {threads, 1, 1}, {grid, 1, 1}, 0};
        kernel(args...);
      });
    for (auto& th : pool) th.join();
  }
}

}  // namespace lsa_emu

#define threadIdx (::lsa_emu::self.thread_idx)
#define blockIdx (::lsa_emu::self.block_idx)
#define blockDim (::lsa_emu::self.block_dim)
#define gridDim (::lsa_emu::self.grid_dim)

inline void __syncthreads() { ::lsa_emu::self.block->block_barrier->wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  ::lsa_emu::self.block->warp_barriers[::lsa_emu::self.thread_idx.x / 32]->wait();
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int offset) {
  const unsigned lane = ::lsa_emu::self.thread_idx.x % 32, warp = ::lsa_emu::self.thread_idx.x / 32;
  unsigned char* x = ::lsa_emu::self.block->exchange[warp].data();
  std::memcpy(x + 8 * lane, &v, sizeof(T));
  __syncwarp();
  T out;
  std::memcpy(&out, x + 8 * (lane ^ unsigned(offset)), sizeof(T));
  __syncwarp();
  return out;
}
template <class T>
T __ldcs(const T* p) {
  return *p;
}
template <class T>
void __stcs(T* p, T v) {
  *p = v;
}
