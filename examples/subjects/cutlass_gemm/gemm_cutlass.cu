// A CUTLASS (2.x device API) float32 GEMM behind the solve() contract: C = A B, row-major,
// on the stream it is given. Headers from the nvidia-cutlass pip package
// (perfledger.kernels.subjects.solve.cutlass_include_dirs; "cutlass": true in spec.json).
#include <cuda_runtime.h>
#include <cutlass/gemm/device/gemm.h>

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K,
                      cudaStream_t stream) {
    using RowMajor = cutlass::layout::RowMajor;
    using Gemm = cutlass::gemm::device::Gemm<float, RowMajor, float, RowMajor, float, RowMajor>;
    Gemm gemm;
    Gemm::Arguments args({M, N, K}, {A, K}, {B, N}, {C, N}, {C, N}, {1.0f, 0.0f});
    gemm(args, nullptr, stream);
}
