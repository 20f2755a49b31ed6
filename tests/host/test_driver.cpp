#include <doctest/doctest.h>

#include <dlfcn.h>

#include <string>

#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
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

TEST_CASE("without a driver, planning fails with NoDriverError, not a crash") {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle) {
    dlclose(handle);
    MESSAGE("a driver is present here; the no-driver path is covered by cli_demo_without_driver");
    return;
  }
  CHECK_THROWS_AS(JitLogBMM::get(Shape{1, 2, 3, 4}), NoDriverError);
  CHECK_THROWS_AS(driver(), NoDriverError);
}
