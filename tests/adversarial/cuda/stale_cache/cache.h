// Device-global state the cheat keeps between launches.
#define STALE_CAP (1u << 20)
__device__ float stale_cache[STALE_CAP];
__device__ int stale_filled[1];
