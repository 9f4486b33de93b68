// Device-global state the cheat keeps between launches.
__device__ int skip_done[1];
