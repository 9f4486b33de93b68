// Device-global call counter of the cheat.
__device__ unsigned int scalar_calls[1];
