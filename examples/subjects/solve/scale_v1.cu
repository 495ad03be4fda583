// Candidate of the solve() example: y = 2 x with float4 loads and stores (n % 4 tail handled by
// a second, tiny kernel: a host function may launch several kernels on its stream).
#include <cuda_runtime.h>

__global__ void scale4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int n4) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
        float4 v = x[i];
        y[i] = make_float4(2.0f * v.x, 2.0f * v.y, 2.0f * v.z, 2.0f * v.w);
    }
}

__global__ void tail_kernel(const float* __restrict__ x, float* __restrict__ y, int start, int n) {
    int i = start + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" void solve(const float* x, float* y, int n, cudaStream_t stream) {
    int n4 = n / 4;
    int blocks = (n4 + 255) / 256;
    if (blocks > 132 * 8) blocks = 132 * 8;
    if (n4 > 0) scale4_kernel<<<blocks, 256, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n4);
    if (n % 4) tail_kernel<<<1, 4, 0, stream>>>(x, y, n4 * 4, n);
}
