// 16x16x16 half-precision tiles on tensor cores with WMMA; one warp per output tile.
#include <mma.h>
using namespace nvcuda;

__global__ void wmma_gemm(const half* a, const half* b, float* c, int M, int N, int K) {
    int tile_m = blockIdx.y;
    int tile_n = blockIdx.x;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(fa, a + tile_m * 16 * K + k, K);
        wmma::load_matrix_sync(fb, b + k * N + tile_n * 16, N);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + tile_m * 16 * N + tile_n * 16, acc, N, wmma::mem_row_major);
}
