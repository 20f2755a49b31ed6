// A program that resets the device (cudaDeviceReset: the primary context destroyed and made again, at the same
// address) and goes on using jitbmm: plans made after the reset must load their kernels in the new context, never
// run the dead one's modules from jitbmm's caches. Its own program, since the reset ends every other test's device
// state; it links the CUDA runtime for the reset and the buffers, as a program would. Exits 77 (CTest: skipped)
// without a GPU, like gpu_main.cpp.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/chain.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device.hpp"
#include "runtime/device_pool.hpp"

using namespace jitbmm;

namespace {

void check_cuda(cudaError_t result, const char* what) {
  if (result != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(result));
}

// `host` in memory from cudaMalloc (freed by the caller's reset or at the end).
float* on_device(const std::vector<float>& host) {
  void* ptr = nullptr;
  check_cuda(cudaMalloc(&ptr, host.size() * sizeof(float)), "cudaMalloc");
  check_cuda(cudaMemcpy(ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  return static_cast<float*>(ptr);
}

std::vector<float> to_host(const float* ptr, std::size_t count) {
  std::vector<float> host(count);
  check_cuda(cudaMemcpy(host.data(), ptr, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

std::vector<float> normal(std::size_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = d(rng);
  return v;
}

// A log product and a chain's log-partition through fresh plans on fresh buffers, each checked against the CPU
// reference (outputs poisoned first, so an unwritten one fails).
void plans_compute_correctly(std::mt19937_64& rng) {
  Problem p;
  p.shape = {3, 17, 33, 9};
  const std::vector<float> a = normal(std::size_t(3 * 17 * 33), rng), b = normal(std::size_t(3 * 33 * 9), rng);
  float *da = on_device(a), *db = on_device(b), *out = on_device(std::vector<float>(3 * 17 * 9, 1e30f));
  SemiringBMM::get(p)(da, db, out);
  const std::vector<float> got = to_host(out, 3 * 17 * 9);
  const std::vector<reference::Element> want = reference::compute(p, a.data(), b.data());
  int wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    wrong += !reference::close(DType::f32, got[i], want[i], reference::tolerance(p));
  CHECK(wrong == 0);

  ChainProblem c;
  c.B = 4, c.T = 12, c.C = 16;
  const std::vector<float> potentials = normal(std::size_t(c.B * (c.T - 1) * c.C * c.C), rng);
  float *dp = on_device(potentials), *score = on_device(std::vector<float>(std::size_t(c.B), 1e30f));
  ChainPlan::get(c)(dp, nullptr, score);
  const std::vector<float> got_score = to_host(score, std::size_t(c.B));
  std::vector<double> want_score(std::size_t(c.B));
  reference::chain_forward(c, potentials.data(), nullptr, want_score.data(), nullptr, nullptr);
  for (std::size_t i = 0; i < want_score.size(); ++i)
    CHECK(got_score[i] == doctest::Approx(want_score[i]).epsilon(1e-5));
  for (void* ptr : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(out), static_cast<void*>(dp),
                    static_cast<void*>(score)})
    cudaFree(ptr);
}

} // namespace

TEST_CASE("after cudaDeviceReset, new plans load their kernels in the new primary context and compute correctly") {
  std::mt19937_64 rng(7);
  check_cuda(cudaFree(nullptr), "cudaFree(nullptr)"); // the runtime's primary context, current on this thread
  const unsigned long long before = current_device()->context_id;
  plans_compute_correctly(rng);
  CHECK_NOTHROW(pool_free(pool_allocate(*current_device(), 1 << 20, nullptr), nullptr));
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check_cuda(cudaDeviceReset(), "cudaDeviceReset");
  check_cuda(cudaFree(nullptr), "cudaFree(nullptr)"); // the primary context made again, current
  const auto device = current_device();
  MESSAGE("context id " << before << " before the reset, " << device->context_id << " after");
  CHECK(device->context_id != before);
  plans_compute_correctly(rng);
  // Scratch memory (jitbmm's pool, made before the reset) is still handed out, and released.
  CUdeviceptr scratch = 0;
  CHECK_NOTHROW(scratch = pool_allocate(*device, 1 << 20, nullptr));
  CHECK_NOTHROW(pool_free(scratch, nullptr));
  CHECK_NOTHROW(release_pool_memory());
}

int main(int argc, char** argv) {
  ::setenv("JITBMM_TUNE", "never", 0); // the default variants: this test is of contexts, not of tuning
  try {
    const auto dev = current_device();
    std::printf("context reset check on %s (%s)\n", dev->name.c_str(), dev->arch().c_str());
  } catch (const NoDriverError& e) {
    std::printf("SKIPPED: no GPU here (%s)\n", e.what());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
