// plus_times f32 against cuBLAS sgemm: an oracle independent of our CPU reference, on buffers the CUDA runtime
// allocated. jitbmm makes the primary context current when none is, and the runtime uses the primary context too,
// so both libraries work in one context. Exits 77 (CTest: skipped) without a GPU, like gpu_main.cpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/device.hpp"

using namespace jitbmm;

namespace {

void check_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(result));
}

void check_cublas(cublasStatus_t result, const char* what) {
  if (result != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: " + cublasGetStatusString(result));
}

// A float array in device memory, from cudaMalloc (not jitbmm's allocator: the point is sharing the context).
class CudaFloats {
public:
  explicit CudaFloats(std::size_t count) : count_(count) {
    check_cuda(cudaMalloc(&ptr_, count * sizeof(float)), "cudaMalloc");
  }
  ~CudaFloats() { cudaFree(ptr_); }
  CudaFloats(const CudaFloats&) = delete;
  CudaFloats& operator=(const CudaFloats&) = delete;
  float* get() const { return ptr_; }
  void upload(const std::vector<float>& host) {
    check_cuda(cudaMemcpy(ptr_, host.data(), count_ * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  std::vector<float> download() const {
    std::vector<float> host(count_);
    check_cuda(cudaMemcpy(host.data(), ptr_, count_ * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return host;
  }

private:
  float* ptr_ = nullptr;
  std::size_t count_;
};

class CublasHandle {
public:
  CublasHandle() {
    check_cublas(cublasCreate(&handle_), "cublasCreate");
    // Plain fp32 FMA, never TF32 tensor cores (whatever NVIDIA_TF32_OVERRIDE says): the 1e-5 bound needs fp32.
    check_cublas(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  }
  ~CublasHandle() { cublasDestroy(handle_); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

private:
  cublasHandle_t handle_ = nullptr;
};

std::vector<float> random_floats(std::size_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

// Row-major out[B][M][N] = a[B][M][K] · b[B][K][N] with cuBLAS, which is column-major: a row-major matrix is its
// transpose in column-major, so it computes out^T = b^T a^T (b first, no transposes). b_batch 0 broadcasts b.
void cublas_bmm(const CublasHandle& handle, const Shape& s, const float* a, const float* b, int64_t b_batch,
                float* out) {
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasSgemmStridedBatched(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.N),
                                         static_cast<int>(s.M), static_cast<int>(s.K), &one, b, static_cast<int>(s.N),
                                         b_batch, a, static_cast<int>(s.K), s.M * s.K, &zero, out,
                                         static_cast<int>(s.N), s.M * s.N, static_cast<int>(s.B)),
               "cublasSgemmStridedBatched");
}

// max over outputs of |jitbmm − cuBLAS| / Σ_k |a||b|: both sum the same products in fp32, in different orders.
double max_relative_difference(const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
                               int64_t b_batch, const std::vector<float>& ours, const std::vector<float>& theirs) {
  double worst = 0;
  for (int64_t bt = 0; bt < s.B; ++bt)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        double magnitude = 0;
        for (int64_t k = 0; k < s.K; ++k)
          magnitude += std::fabs(double(a[(bt * s.M + i) * s.K + k]) * b[bt * b_batch + k * s.N + j]);
        const std::size_t at = static_cast<std::size_t>((bt * s.M + i) * s.N + j);
        const double diff = std::fabs(double(ours[at]) - theirs[at]) / std::fmax(magnitude, 1e-30);
        if (!(diff <= worst) && !std::isnan(worst)) worst = diff; // a NaN (an unwritten output) sticks
      }
  return worst;
}

} // namespace

TEST_CASE("plus_times f32 matches cublasSgemmStridedBatched on buffers from cudaMalloc") {
  struct Case {
    Shape shape;
    bool broadcast_b;
  };
  const Case cases[] = {
      {{4, 128, 256, 64}, false}, {{3, 17, 129, 5}, false}, {{2, 33, 1, 65}, false}, {{5, 31, 77, 130}, true}};
  const CublasHandle handle;
  std::mt19937_64 rng(42);
  for (const Case& c : cases) {
    const Shape& s = c.shape;
    CAPTURE(to_string(s));
    CAPTURE(c.broadcast_b);
    const int64_t b_batch = c.broadcast_b ? 0 : s.K * s.N;
    const std::vector<float> a = random_floats(s.B * s.M * s.K, rng);
    const std::vector<float> b = random_floats((c.broadcast_b ? 1 : s.B) * s.K * s.N, rng);
    CudaFloats da(a.size()), db(b.size()), ours(s.B * s.M * s.N), theirs(s.B * s.M * s.N);
    da.upload(a);
    db.upload(b);
    // All-ones bytes are NaN: an output jitbmm leaves unwritten cannot pass.
    check_cuda(cudaMemset(ours.get(), 0xff, s.B * s.M * s.N * sizeof(float)), "cudaMemset");

    Problem p;
    p.semiring = Semiring::plus_times;
    p.dtype = DType::f32;
    p.shape = s;
    p.b_strides = Strides{b_batch, s.N, 1};
    SemiringBMM::get(p)(da.get(), db.get(), ours.get());
    cublas_bmm(handle, s, da.get(), db.get(), b_batch, theirs.get());
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    const double worst = max_relative_difference(s, a, b, b_batch, ours.download(), theirs.download());
    MESSAGE(to_string(s) << (c.broadcast_b ? " (b broadcast)" : "") << ": max relative difference " << worst);
    CHECK(worst <= 1e-5);
  }
}

int main(int argc, char** argv) {
  try {
    // Makes the primary context current before the first cudaMalloc, so both libraries use it.
    const auto dev = current_device();
    std::printf("cuBLAS check on %s (%s)\n", dev->name.c_str(), dev->arch().c_str());
  } catch (const NoDriverError& e) {
    std::printf("SKIPPED: no GPU here (%s)\n", e.what());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
