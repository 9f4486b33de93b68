// Device-global state the cheat keeps between launches.
__device__ int call_count[1];
