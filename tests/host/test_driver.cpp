#include <doctest/doctest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <regex>
#include <string>

#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/device.hpp"
#include "runtime/driver_api.hpp"

using namespace jitbmm;

TEST_CASE("a missing driver library is a NoDriverError that says so") {
  try {
    load_driver("/nonexistent/libcuda.so.1");
    FAIL("expected NoDriverError");
  } catch (const NoDriverError& e) {
    CHECK(std::string(e.what()).find("no CUDA driver found") != std::string::npos);
    CHECK(std::string(e.what()).find("/nonexistent/libcuda.so.1") != std::string::npos);
  }
}

TEST_CASE("a library without the driver's entry points is a NoDriverError naming the missing one") {
  try {
    load_driver("libcrypto.so.3"); // loads, but is not a CUDA driver
    FAIL("expected NoDriverError");
  } catch (const NoDriverError& e) {
    CHECK(std::string(e.what()).find("lacks the entry point cuInit") != std::string::npos);
  }
}

namespace {

constexpr const char* kNoDriver = "/nonexistent/libcuda.so.1";

bool forced_without_driver() {
  const char* env = std::getenv("JITBMM_LIBCUDA");
  return env && std::string(env) == kNoDriver;
}

// Runs this test binary again, with JITBMM_LIBCUDA forced to a missing library and only the test cases matching
// `filter`: driver() is loaded once per process, so the no-driver path needs a process of its own.
std::string run_self_without_driver(const std::string& filter, int& status) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  self[n] = '\0';
  const std::string command =
      std::string("JITBMM_LIBCUDA=") + kNoDriver + " '" + self + "' '--test-case=" + filter + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe);
  std::string out;
  char buffer[4096];
  for (std::size_t got; (got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, got);
  status = ::pclose(pipe);
  return out;
}

} // namespace

// Runs in a child process with no driver (see below); run directly, it checks whatever this machine has.
TEST_CASE("no-driver path: planning and driver() throw NoDriverError naming the library") {
  if (!forced_without_driver()) {
    int status = -1;
    const std::string out = run_self_without_driver("no-driver path: planning*", status);
    CAPTURE(out);
    CHECK(status == 0);
    // It ran in the child, and passed.
    CHECK(std::regex_search(out, std::regex(R"(test cases: +1 \| +1 passed \| +0 failed)")));
    return;
  }
  CHECK_THROWS_AS(JitLogBMM::get(Shape{1, 2, 3, 4}), NoDriverError);
  try {
    driver();
    FAIL("expected NoDriverError");
  } catch (const NoDriverError& e) {
    CHECK(std::string(e.what()).find(std::string("could not load ") + kNoDriver) != std::string::npos);
  }
  CHECK_THROWS_AS(current_device(), NoDriverError);
}

TEST_CASE("the driver this machine has: loaded with every entry point, or a NoDriverError that says why") {
  if (forced_without_driver()) return; // the case above covers this process
  const char* env = std::getenv("JITBMM_LIBCUDA");
  const std::string library = env && *env ? env : "libcuda.so.1";
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    // No libcuda here: driver() must say so, and planning must fail the same way.
    try {
      driver();
      FAIL("expected NoDriverError");
    } catch (const NoDriverError& e) {
      CHECK(std::string(e.what()).find("no CUDA driver found: could not load " + library) != std::string::npos);
    }
    CHECK_THROWS_AS(JitLogBMM::get(Shape{1, 2, 3, 4}), NoDriverError);
    return;
  }
  dlclose(handle);
  // A driver library is present: load_driver resolves every entry point jitbmm uses.
  const DriverApi api = load_driver(library);
  CHECK(api.library == library);
  CHECK(api.handle != nullptr);
#define JITBMM_CHECK_RESOLVED(member, symbol, parameters) CHECK_MESSAGE(static_cast<bool>(api.member), #symbol);
  JITBMM_DRIVER_FUNCTIONS(JITBMM_CHECK_RESOLVED)
#undef JITBMM_CHECK_RESOLVED
  int version = 0;
  CHECK(api.cuDriverGetVersion(&version) == CUDA_SUCCESS);
  CHECK(version > 0);
  // cuInit succeeds where a GPU is usable; otherwise driver() names cuInit's failure.
  try {
    const DriverApi& d = driver();
    CHECK(d.library == library);
    const auto device = current_device();
    CHECK(!device->name.empty());
    CHECK(device->arch().rfind("sm_", 0) == 0);
  } catch (const NoDriverError& e) {
    CHECK(std::string(e.what()).find("cuInit failed") != std::string::npos);
  }
}
