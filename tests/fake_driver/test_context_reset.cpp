// A context made anew at a dead one's address, on the fake driver (test_with_fake_driver.cpp says how it runs): a
// program resets the primary context (cudaDeviceReset does), which CUDA makes again at the same address with a new
// id. Plans made after the reset must load their kernels in the new context, never take the dead one's modules from
// jitbmm's caches. The reset changes the fake's state for the whole process, so it runs in a helper process.
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "jitbmm/c_api.h"
#include "jitbmm/chain.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "tests/fake_driver/helper_process.hpp"

using namespace jitbmm;

namespace {

// What `f` threw ("none" when it threw nothing).
template <class F> std::string outcome(F f) {
  try {
    f();
    return "none";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// The C ABI's plan of a small log product, run once: its status and the last error.
std::string c_abi_run(void* a, void* b, void* out) {
  jitbmm_problem p;
  jitbmm_plan* plan = nullptr;
  jitbmm_status s = jitbmm_problem_row_major(&p, "log", "f32", 2, 3, 4, 5);
  if (s == JITBMM_OK) s = jitbmm_plan_create(&p, &plan);
  if (s == JITBMM_OK) s = jitbmm_plan_run(plan, a, b, out, nullptr, nullptr);
  const std::string said = s == JITBMM_OK ? "none" : std::to_string(int(s)) + " " + jitbmm_last_error();
  jitbmm_plan_destroy(plan);
  return said;
}

} // namespace

// --context-reset: plans a product, a chain and a C ABI product and runs them; resets the primary context through
// the fake's cuDevicePrimaryCtxReset; then prints what each of the same calls threw ("<what> none" where it ran), and
// what running a plan made before the reset threw.
int test::context_reset_helper() {
  void* fake = ::dlopen(std::getenv("JITBMM_LIBCUDA"), RTLD_NOW | RTLD_LOCAL); // the library's own handle
  auto* reset = fake ? reinterpret_cast<int (*)(int)>(::dlsym(fake, "cuDevicePrimaryCtxReset_v2")) : nullptr;
  if (!reset) throw std::runtime_error("the fake driver's cuDevicePrimaryCtxReset_v2 is not there");
  Problem product;
  product.shape = {2, 3, 4, 5};
  ChainProblem chain;
  chain.B = 2, chain.T = 8, chain.C = 4;
  DeviceBuffer a(1 << 12), b(1 << 12), out(1 << 12), potentials(1 << 12), score(64);
  auto run_product = [&] { SemiringBMM::get(product)(a.get(), b.get(), out.get()); };
  auto run_chain = [&] { ChainPlan::get(chain)(potentials.get(), nullptr, score.get()); };
  std::printf("before-product %s\nbefore-chain %s\nbefore-c-abi %s\n", outcome(run_product).c_str(),
              outcome(run_chain).c_str(), c_abi_run(a.get(), b.get(), out.get()).c_str());
  const SemiringBMM old = SemiringBMM::get(product);
  const unsigned long long id = current_device()->context_id;
  if (reset(0) != 0) throw std::runtime_error("cuDevicePrimaryCtxReset failed");
  std::printf("new-id %d\n", int(current_device()->context_id != id));
  std::printf("after-product %s\nafter-chain %s\nafter-c-abi %s\n", outcome(run_product).c_str(),
              outcome(run_chain).c_str(), c_abi_run(a.get(), b.get(), out.get()).c_str());
  std::printf("old-plan %s\n", outcome([&] { old(a.get(), b.get(), out.get()); }).c_str());
  return 0;
}

TEST_CASE("after the primary context is reset (made anew at its address), new plans load their kernels anew; a plan "
          "made before it fails, naming the dead context") {
  const test::HelperRun r = test::run_helper({"--context-reset"}, {{"JITBMM_CACHE", "off"}}, true);
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const char* call : {"product", "chain", "c-abi"}) {
    CAPTURE(call);
    CHECK(test::line_of(r.output, std::string("before-") + call) == "none");
    CHECK(test::line_of(r.output, std::string("after-") + call) == "none");
  }
  CHECK(test::line_of(r.output, "new-id") == "1");
  CHECK(test::line_of(r.output, "old-plan").find("CUDA_ERROR_CONTEXT_IS_DESTROYED") != std::string::npos);
}
