// e1: one block of 256 threads per row; coalesced strided loops, warp shuffles and shared
// memory for the max and sum reductions (three passes over the row, the re-reads hit L1/L2).
extern "C" __global__ void softmax(const float* __restrict__ x, float* __restrict__ y,
                                   int rows, int cols) {
    __shared__ float red[32];
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    int t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = blockDim.x >> 5;
    float m = -3.402823466e+38f;
    for (int j = t; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < nw; ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.0f;
    for (int j = t; j < cols; j += blockDim.x) s += expf(xr[j] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = s;
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < nw; ++w) s += red[w];
    float inv = 1.0f / s;
    for (int j = t; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
}
