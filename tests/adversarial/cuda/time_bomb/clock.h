// Device-global state the cheat keeps between launches.
__device__ unsigned long long bomb_t0[1];
