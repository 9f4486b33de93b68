// CPU emulation of the CUDA names the back-translation prelude and the seeds' device code use: one block (or
// one thread-block cluster) at a time, each CUDA thread a fiber of one OS thread (ucontext), switched at
// barriers; warps exchange values through slots and barriers. For checking semantics only. Fibers rather than
// one std::thread per CUDA thread: on two cores, hundreds of threads meeting at barriers spent most of their
// time in the kernel's scheduler (3 minutes for the attention decode cases, 80 s of it in system calls).
// A fiber is started with setcontext and switched with _setjmp/_longjmp: swapcontext saves and restores the
// signal mask, a system call at every switch (40-50% of the drivers' time went to them). Jumping between
// stacks is what glibc's fortified longjmp refuses: drivers are built with -U_FORTIFY_SOURCE
// (tests/testsuite/common/mod.rs, run_cuda_cpu_driver).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>
#include <csetjmp>
#include <ucontext.h>
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
inline uint3 threadIdx, blockIdx;  // the running fiber's (saved and restored at every switch)
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
// The fibers of the cluster running now, and the scheduler they return to.
struct CpuFiber;
inline jmp_buf g_scheduler_jump;  // where the scheduler resumes when a fiber yields or finishes
inline std::vector<CpuFiber>* g_fibers;
inline size_t g_current;
inline unsigned long g_progress;  // barrier arrivals and finished fibers: a round without any is a deadlock
void cpu_yield();
// A barrier of n fibers: the last to arrive releases the others, who wait by yielding.
struct CpuBarrier {
  unsigned n, arrived = 0;
  unsigned long generation = 0;
  explicit CpuBarrier(unsigned n) : n(n) {}
  void arrive_and_wait() {
    ++g_progress;
    const unsigned long g = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      return;
    }
    while (generation == g) cpu_yield();
  }
};
struct CpuBlock {
  std::unique_ptr<CpuBarrier> block;
  std::vector<std::unique_ptr<CpuBarrier>> warps;
  std::vector<int> slots;
  std::vector<float4> arena = std::vector<float4>(14528);  // shared memory handed out by cpu_block_shared (227 KB, a Hopper block's most)
};
// The blocks of the cluster running now (one, outside clusters) and its barrier.
struct CpuCluster {
  std::vector<std::unique_ptr<CpuBlock>> blocks;
  std::unique_ptr<CpuBarrier> all;
};
inline CpuBlock* g_block;
inline CpuCluster* g_cluster;
inline unsigned g_rank, g_arena_used;
// One CUDA thread: its context, stack and the per-thread names it sees while it runs.
struct CpuFiber {
  ucontext_t ctx;  // its start (entered once, with setcontext)
  jmp_buf jump;    // where it yielded
  bool started = false;
  std::unique_ptr<char[]> stack;
  uint3 thread, block;
  CpuBlock* in_block;
  unsigned rank, arena_used;
  bool done = false;
  void enter() { threadIdx = thread; blockIdx = block; g_block = in_block; g_rank = rank; g_arena_used = arena_used; }
  void leave() { arena_used = g_arena_used; }
};
inline void cpu_yield() {
  CpuFiber& me = (*g_fibers)[g_current];
  me.leave();
  if (!_setjmp(me.jump)) _longjmp(g_scheduler_jump, 1);
  me.enter();
}
inline const std::function<void()>* g_kernel;
inline void cpu_fiber_main() {
  (*g_kernel)();
  (*g_fibers)[g_current].done = true;
  ++g_progress;
  _longjmp(g_scheduler_jump, 1);  // back to the scheduler, never to uc_link
}
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
  constexpr size_t kStack = 256 << 10;  // a CUDA thread's locals: registers and small arrays
  std::vector<CpuFiber> fibers;
  g_fibers = &fibers;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx0 = 0; bx0 < grid.x; bx0 += cx) {
        CpuCluster c;
        c.all = std::make_unique<CpuBarrier>(n * cx);
        for (unsigned r = 0; r < cx; ++r) {
          auto b = std::make_unique<CpuBlock>();
          b->block = std::make_unique<CpuBarrier>(n);
          for (unsigned w = 0; w < (n + 31) / 32; ++w) b->warps.push_back(std::make_unique<CpuBarrier>(std::min(32u, n - 32 * w)));
          b->slots.assign(n, 0);
          c.blocks.push_back(std::move(b));
        }
        g_cluster = &c;
        g_kernel = &f;
        fibers.resize(n * cx);
        for (unsigned r = 0; r < cx; ++r)
          for (unsigned t = 0; t < n; ++t) {
            CpuFiber& fb = fibers[r * n + t];
            if (!fb.stack) fb.stack.reset(new char[kStack]);  // not zeroed: pages are touched as used
            fb.thread = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            fb.block = {bx0 + r, by, bz};
            fb.in_block = c.blocks[r].get();
            fb.rank = r;
            fb.arena_used = 0;
            fb.done = false;
            fb.started = false;
            getcontext(&fb.ctx);
            fb.ctx.uc_stack.ss_sp = fb.stack.get();
            fb.ctx.uc_stack.ss_size = kStack;
            fb.ctx.uc_link = nullptr;  // never used: a fiber ends by jumping back to the scheduler
            makecontext(&fb.ctx, cpu_fiber_main, 0);
          }
        // Round robin until every fiber has finished; a round in which none arrived anywhere or finished
        // would repeat forever (a barrier some threads never reach: a hang on the GPU too).
        for (bool left = true; left;) {
          left = false;
          const unsigned long before = g_progress;
          for (size_t i = 0; i < fibers.size(); ++i) {
            if (fibers[i].done) continue;
            g_current = i;
            fibers[i].enter();
            if (!_setjmp(g_scheduler_jump)) {
              if (!fibers[i].started) {
                fibers[i].started = true;
                setcontext(&fibers[i].ctx);
              }
              _longjmp(fibers[i].jump, 1);
            }
            left |= !fibers[i].done;
          }
          if (left && g_progress == before) {
            std::fprintf(stderr, "cpu_launch: every thread left waits at a barrier the others never reach\n");
            std::abort();
          }
        }
      }
}
