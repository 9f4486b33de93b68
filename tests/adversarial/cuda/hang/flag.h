// Device-global state the cheat keeps between launches.
__device__ int hang_flag[1];
