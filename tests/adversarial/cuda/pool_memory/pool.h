// Device-global memory of the cheat, meant to outlive its candidate.
#define POOL_SLOTS 16
#define POOL_CAP (1u << 20)
__device__ float pool[POOL_SLOTS * POOL_CAP];
__device__ unsigned int pool_key[POOL_SLOTS];
