// Iteration 2: the same tiling with the tile padded to 33 columns: the column-wise shared-memory
// reads fall into 32 different banks (no bank conflicts).
// perfledger-launch: grid=(ceil(N/32), ceil(M/32)) block=(32, 8)
#define TILE 32
extern "C" __global__ void transpose(const float* x, float* y, int M, int N) {
    __shared__ float tile[TILE][TILE + 1];
    int bx = blockIdx.x * TILE, by = blockIdx.y * TILE;
    for (int k = threadIdx.y; k < TILE; k += 8) {
        int row = by + k, col = bx + threadIdx.x;
        if (row < M && col < N) tile[k][threadIdx.x] = x[(size_t)row * N + col];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < TILE; k += 8) {
        int row = bx + k, col = by + threadIdx.x;
        if (row < N && col < M) y[(size_t)row * M + col] = tile[threadIdx.x][k];
    }
}
