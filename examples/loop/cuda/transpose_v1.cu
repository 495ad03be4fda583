// Iteration 1: stage 32x32 tiles in shared memory so that both the global loads and the global
// stores are coalesced; 8 rows of threads each move 4 elements. The tile is not padded, so the
// column-wise shared-memory reads conflict on one bank.
// perfledger-launch: grid=(ceil(N/32), ceil(M/32)) block=(32, 8)
#define TILE 32
extern "C" __global__ void transpose(const float* x, float* y, int M, int N) {
    __shared__ float tile[TILE][TILE];
    int bx = blockIdx.x * TILE, by = blockIdx.y * TILE;
    for (int k = threadIdx.y; k < TILE; k += 8) {
        int row = by + k, col = bx + threadIdx.x;
        if (row < M && col < N) tile[k][threadIdx.x] = x[(size_t)row * N + col];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < TILE; k += 8) {
        int row = bx + k, col = by + threadIdx.x;  // row of y = column of x
        if (row < N && col < M) y[(size_t)row * M + col] = tile[threadIdx.x][k];
    }
}
