// Roles in everyday tiled code: pointers moved to a tile before use are still inputs, and a const
// parameter is never an output.
#define TILE 16

__global__ void sgemm_tiled(int M, int N, int K, const float* A, const float* B, float* C) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    A += blockIdx.y * TILE * K;
    B += blockIdx.x * TILE;
    C += blockIdx.y * TILE * N + blockIdx.x * TILE;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[threadIdx.y][threadIdx.x] = A[threadIdx.y * K + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[threadIdx.y * N + threadIdx.x];
        __syncthreads();
        A += TILE;
        B += TILE * N;
        for (int i = 0; i < TILE; ++i) {
            acc += As[threadIdx.y][i] * Bs[i][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[threadIdx.y * N + threadIdx.x] = acc;
    }
}

// Not declared const, only moved and read: an input all the same.
__global__ void row_sums(const int n, float* rows, float* sums) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    rows += r * n;
    float s = 0.0f;
    for (int j = 0; j < n; j++) {
        s += *rows;
        rows++;
    }
    sums[r] = s;
}

// A walk that stores through a pointer it moves, and an output moved by plain assignment.
__global__ void copy_walk(const float* src, float* dst, unsigned long n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    src = src + i * 4;
    dst = dst + i * 4;
    for (int j = 0; j < 4; j++) {
        *dst++ = *src++ * 2.0f;
    }
}

void launch(int M, int N, int K, const float* A, const float* B, float* C, float* rows, float* sums) {
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    sgemm_tiled<<<grid, block>>>(M, N, K, A, B, C);
    row_sums<<<(M + 255) / 256, 256>>>(N, rows, sums);
}
