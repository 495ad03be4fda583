// Iteration 3: the padded tiling with read-only loads (__ldg, __restrict__) and unrolled
// element loops; the memory traffic is unchanged, so little or no gain is expected.
// perfledger-launch: grid=(ceil(N/32), ceil(M/32)) block=(32, 8)
#define TILE 32
extern "C" __global__ void transpose(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
    __shared__ float tile[TILE][TILE + 1];
    int bx = blockIdx.x * TILE, by = blockIdx.y * TILE;
#pragma unroll
    for (int k = threadIdx.y; k < TILE; k += 8) {
        int row = by + k, col = bx + threadIdx.x;
        if (row < M && col < N) tile[k][threadIdx.x] = __ldg(&x[(size_t)row * N + col]);
    }
    __syncthreads();
#pragma unroll
    for (int k = threadIdx.y; k < TILE; k += 8) {
        int row = bx + k, col = by + threadIdx.x;
        if (row < N && col < M) y[(size_t)row * M + col] = tile[threadIdx.x][k];
    }
}
