// On an sm_90 GPU, alone (not part of the build): templates/wgmma.cuh's descriptor (128-byte swizzle, the layout of
// exp_matmul_bounds.cuh's em_sw128_at) and fragment conventions, one 64×N×32 product per N against the CPU.
// scripts/gpu-wgmma builds and runs it first:
//   nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 tests/standalone/wgmma_primitives.cu
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include "../../templates/exp_matmul_bounds.cuh"
#include "../../templates/wgmma.cuh"
using namespace jb;
constexpr int BK = 32;
template <int N>
__global__ void k(const float* A, const float* B, float* D) {
  __shared__ __align__(1024) float sa[64 * BK];
  __shared__ __align__(1024) float sb[N * BK];
  for (int i = threadIdx.x; i < 64 * BK; i += 128) { int r = i / BK, c = i % BK; sa[em_sw128_at(r, c)] = A[i]; }
  for (int i = threadIdx.x; i < N * BK; i += 128) { int r = i / BK, c = i % BK; sb[em_sw128_at(r, c)] = B[i]; }
  wg_fence_async_shared();
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
  unsigned a0 = (unsigned)__cvta_generic_to_shared(sa), b0 = (unsigned)__cvta_generic_to_shared(sb);
  wg_fence();
  for (int kk = 0; kk < BK / 8; ++kk)
    WgTf32::mma<N>(d, wg_descriptor(a0 + kk * 32), wg_descriptor(b0 + kk * 32), kk > 0);
  wg_commit();
  wg_wait<0>();
  wg_pin(d);
  int w = threadIdx.x / 32, l = threadIdx.x % 32;
  for (int n = 0; n < N / 8; ++n)
    for (int e = 0; e < 4; ++e) {
      int r = 16 * w + l / 4 + 8 * (e / 2), c = 8 * n + 2 * (l % 4) + e % 2;
      D[r * N + c] = d[4 * n + e];
    }
}
template <int N> int run() {
  std::vector<float> A(64 * BK), B(N * BK), D(64 * N);
  for (auto& x : A) x = (float)(rand() % 17 - 8) / 4;  // exact in tf32
  for (auto& x : B) x = (float)(rand() % 13 - 6) / 2;
  float *dA, *dB, *dD;
  cudaMalloc(&dA, A.size() * 4); cudaMalloc(&dB, B.size() * 4); cudaMalloc(&dD, D.size() * 4);
  cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
  cudaMemset(dD, 0xff, D.size() * 4);
  k<N><<<1, 128>>>(dA, dB, dD);
  cudaError_t e = cudaDeviceSynchronize();
  cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < 64; ++i) for (int j = 0; j < N; ++j) {
    double s = 0; for (int kk = 0; kk < BK; ++kk) s += A[i * BK + kk] * B[j * BK + kk];
    if (!(std::fabs(s - D[i * N + j]) < 1e-3)) { if (bad < 3) printf("  (%d,%d) %g vs %g\n", i, j, D[i*N+j], s); ++bad; }
  }
  printf("n%d: %s, %d bad of %d\n", N, cudaGetErrorString(e), bad, 64 * N);
  return bad;
}
int main() { return run<64>() + run<128>() + run<256>() ? 1 : 0; }
