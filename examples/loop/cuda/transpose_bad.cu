// An incorrect candidate (for the R25 attempt record): the tile is read back without the
// transposition, so y receives x's layout.
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
        if (row < N && col < M) y[(size_t)row * M + col] = tile[k][threadIdx.x];
    }
}
