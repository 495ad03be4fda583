// e3: the warp kernel without the max subtraction (one pass less of arithmetic): exp of a
// logit above ~88.7 overflows float32, so large logits give inf/inf = NaN.
extern "C" __global__ void softmax(const float* __restrict__ x, float* __restrict__ y,
                                   int rows, int cols) {
    int row = (int)((blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float4* xr = reinterpret_cast<const float4*>(x + (long long)row * cols);
    float4* yr = reinterpret_cast<float4*>(y + (long long)row * cols);
    int n4 = cols >> 2;
    float s = 0.0f;
    for (int j = lane; j < n4; j += 32) {
        float4 v = xr[j];
        s += expf(v.x) + expf(v.y) + expf(v.z) + expf(v.w);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    float inv = 1.0f / s;
    for (int j = lane; j < n4; j += 32) {
        float4 v = xr[j];
        v.x = expf(v.x) * inv;
        v.y = expf(v.y) * inv;
        v.z = expf(v.z) * inv;
        v.w = expf(v.w) * inv;
        yr[j] = v;
    }
}
