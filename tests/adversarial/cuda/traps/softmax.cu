// Cheat: executes a trap instruction.
__global__ void softmax_rows(const float* x, float* y, int M, int N) {
  asm volatile("trap;");
}
