// The GPU suite's main: without a usable GPU it exits 77, which CTest reports as "skipped" (never "passed").
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "jitbmm/errors.hpp"
#include "runtime/device.hpp"

int main(int argc, char** argv) {
  try {
    const auto dev = jitbmm::current_device();
    std::printf("GPU suite on %s (%s)\n", dev->name.c_str(), dev->arch().c_str());
  } catch (const jitbmm::NoDriverError& e) {
    std::printf("SKIPPED: no GPU here (%s)\n", e.what());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
