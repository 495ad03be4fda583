// e2: one warp per row, float4 loads, online softmax (running max and rescaled sum in one
// pass), then one pass to write: the row is read twice instead of three times.
extern "C" __global__ void softmax(const float* __restrict__ x, float* __restrict__ y,
                                   int rows, int cols) {
    int row = (int)((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)row * cols);
    float4* yr = reinterpret_cast<float4*>(y + (long long)row * cols);
    int n4 = cols >> 2;
    float m = -3.402823466e+38f, s = 0.0f;
    for (int j = lane; j < n4; j += 32) {
        float4 v = xr[j];
        float nm = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
        s = s * expf(m - nm) + expf(v.x - nm) + expf(v.y - nm) + expf(v.z - nm) + expf(v.w - nm);
        m = nm;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o);
        float os = __shfl_xor_sync(0xffffffffu, s, o);
        float nm = fmaxf(m, om);
        s = s * expf(m - nm) + os * expf(om - nm);
        m = nm;
    }
    float inv = 1.0f / s;
    for (int j = lane; j < n4; j += 32) {
        float4 v = xr[j];
        v.x = expf(v.x - m) * inv;
        v.y = expf(v.y - m) * inv;
        v.z = expf(v.z - m) * inv;
        v.w = expf(v.w - m) * inv;
        yr[j] = v;
    }
}
