// Baseline: naive transpose. Reads are coalesced (consecutive threads, consecutive columns of x),
// writes are strided by M floats: every warp's store touches 32 sectors.
// perfledger-launch: grid=(ceil(N/32), ceil(M/8)) block=(32, 8)
extern "C" __global__ void transpose(const float* x, float* y, int M, int N) {
    int col = blockIdx.x * 32 + threadIdx.x;
    int row = blockIdx.y * 8 + threadIdx.y;
    if (row < M && col < N) {
        y[(size_t)col * M + row] = x[(size_t)row * N + col];
    }
}
