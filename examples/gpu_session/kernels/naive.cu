// The original: one thread per row, three serial passes over the row (max, sum, write).
// Adjacent threads read addresses one row apart: no coalescing.
extern "C" __global__ void softmax(const float* __restrict__ x, float* __restrict__ y,
                                   int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    float m = -3.402823466e+38f;
    for (int j = 0; j < cols; ++j) m = fmaxf(m, xr[j]);
    float s = 0.0f;
    for (int j = 0; j < cols; ++j) s += expf(xr[j] - m);
    float inv = 1.0f / s;
    for (int j = 0; j < cols; ++j) yr[j] = expf(xr[j] - m) * inv;
}
