// CPU emulation of the CUDA names the back-translation prelude and the seeds' device code use: one block (or
// one thread-block cluster) at a time, one std::thread per CUDA thread, warps exchanging values through slots
// and barriers. For checking semantics only.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#define __device__
#define __host__
#define __global__
#define __shared__ static
#define __constant__ static
struct float2 { float x, y; }; struct float3 { float x, y, z; }; struct float4 { float x, y, z, w; };
struct int2 { int x, y; }; struct int3 { int x, y, z; }; struct int4 { int x, y, z, w; };
struct uint2 { unsigned x, y; }; struct uint3 { unsigned x, y, z; }; struct uint4 { unsigned x, y, z, w; };
struct ulong2 { unsigned long x, y; };
inline uint3 make_uint3(unsigned a, unsigned b, unsigned c) { return {a, b, c}; }
inline thread_local uint3 threadIdx, blockIdx;
inline uint3 blockDim, gridDim;
// 16-bit floats with real values (storage bits b, conversions rounded to nearest even), so 16-bit device code
// can run here too: __half through the compiler's _Float16, bfloat16 by rounding a float's top half.
struct __half {
  unsigned short b;
  __half() = default;
  __half(float f) { _Float16 h = (_Float16)f; std::memcpy(&b, &h, 2); }
  operator float() const { _Float16 h; std::memcpy(&h, &b, 2); return (float)h; }
};
struct __half2 { __half x, y; };
struct __nv_bfloat16 {
  unsigned short b;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) {
    unsigned u; std::memcpy(&u, &f, 4);
    b = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40) : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
  }
  operator float() const { unsigned u = (unsigned)b << 16; float f; std::memcpy(&f, &u, 4); return f; }
};
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __half __habs(__half h) { return h; }
inline __half __hfma(__half a, __half, __half) { return a; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline float rsqrtf(float x) { return 1 / std::sqrt(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
// Byte i of the result is byte (s >> 4 i) & 7 of the 8 bytes y:x (x the low four).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
template <class T> T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
template <class T> T atomicMax(T* p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <class T> T atomicMin(T* p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <class T> T atomicCAS(T* p, T c, T v) { T o = *p; if (o == c) *p = v; return o; }
template <class T> T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }
struct CpuBlock {
  std::unique_ptr<std::barrier<>> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<int> slots;
  std::vector<float4> arena = std::vector<float4>(4096);  // shared memory handed out by cpu_block_shared (64 KB)
};
// The blocks of the cluster running now (one, outside clusters) and its barrier.
struct CpuCluster {
  std::vector<std::unique_ptr<CpuBlock>> blocks;
  std::unique_ptr<std::barrier<>> all;
};
inline thread_local CpuBlock* g_block;
inline thread_local CpuCluster* g_cluster;
inline thread_local unsigned g_rank, g_arena_used;
inline unsigned cpu_lin() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline void __syncthreads() { g_block->block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_block->warps[cpu_lin() / 32]->arrive_and_wait(); }
inline int __shfl_sync(unsigned, int v, int src, int = 32) {
  unsigned l = cpu_lin(), w = l / 32;
  g_block->slots[l] = v;
  g_block->warps[w]->arrive_and_wait();
  int r = g_block->slots[w * 32 + (unsigned)src];
  g_block->warps[w]->arrive_and_wait();
  return r;
}
inline unsigned __ballot_sync(unsigned m, int p) {
  unsigned r = 0;
  for (int s = 0; s < 32; ++s) r |= (unsigned)(__shfl_sync(m, p != 0, s) != 0) << s;
  return r;
}
inline int __any_sync(unsigned m, int p) { return __ballot_sync(m, p) != 0; }
inline int __all_sync(unsigned m, int p) { return __ballot_sync(m, p) == 0xffffffffu; }
inline unsigned __activemask() { return 0xffffffffu; }
// Thread-block clusters: this block's rank and the cluster's size, a barrier over every thread of the cluster,
// and `p` (in this block's shared memory) translated to block `rank`'s.
inline unsigned cpu_cluster_rank() { return g_rank; }
inline unsigned cpu_cluster_size() { return (unsigned)g_cluster->blocks.size(); }
inline void cpu_cluster_sync() { g_cluster->all->arrive_and_wait(); }
template <class T> T* cpu_in_block(T* p, unsigned rank) {
  const auto off = reinterpret_cast<const char*>(p) - reinterpret_cast<const char*>(g_block->arena.data());
  return reinterpret_cast<T*>(reinterpret_cast<char*>(g_cluster->blocks.at(rank)->arena.data()) + off);
}
// `bytes` of the block's shared memory (16-byte aligned): every thread of a block declares its shared arrays in
// the same order, so each gets the same address; static __shared__ would be one array for all blocks at once.
inline void* cpu_block_shared(size_t bytes) {
  void* p = reinterpret_cast<char*>(g_block->arena.data()) + g_arena_used;
  g_arena_used += (unsigned)((bytes + 15) / 16 * 16);
  if (g_arena_used > g_block->arena.size() * sizeof(float4)) std::abort();
  return p;
}
// Runs f over the grid of blocks as MLX-CUDA launches a custom kernel: the grid counts threads, blocks have
// the threadgroup's size, ceil(grid / threadgroup) of them (so threads past the grid exist). With a cluster
// of cx blocks along x (as __cluster_dims__(cx, 1, 1) makes it), the blocks of a cluster run at once.
inline void cpu_launch(uint3 threads, uint3 tg, const std::function<void()>& f, unsigned cx = 1) {
  uint3 block = tg;
  uint3 grid = {(threads.x + block.x - 1) / block.x, (threads.y + block.y - 1) / block.y, (threads.z + block.z - 1) / block.z};
  if (grid.x % cx != 0) std::abort();  // CUDA refuses such a launch
  gridDim = grid;
  blockDim = block;
  unsigned n = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx0 = 0; bx0 < grid.x; bx0 += cx) {
        CpuCluster c;
        c.all = std::make_unique<std::barrier<>>(n * cx);
        for (unsigned r = 0; r < cx; ++r) {
          auto b = std::make_unique<CpuBlock>();
          b->block = std::make_unique<std::barrier<>>(n);
          for (unsigned w = 0; w < (n + 31) / 32; ++w) b->warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, n - 32 * w)));
          b->slots.assign(n, 0);
          c.blocks.push_back(std::move(b));
        }
        std::vector<std::thread> ts;
        for (unsigned r = 0; r < cx; ++r)
          for (unsigned t = 0; t < n; ++t)
            ts.emplace_back([&, r, t] {
              g_cluster = &c;
              g_block = c.blocks[r].get();
              g_rank = r;
              g_arena_used = 0;
              blockIdx = {bx0 + r, by, bz};
              threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
              f();
            });
        for (auto& t : ts) t.join();
      }
}
