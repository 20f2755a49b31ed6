// The main of the host and nvrtc suites: doctest, less the test cases whose need is not met here (suite_main.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include "suite_main.hpp"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const bool root = ::geteuid() == 0;
  return jitbmm::test::run_suite(context, {{jitbmm::test::kNeedsRoot, root, "not running as root"},
                                           {jitbmm::test::kNeedsNonRoot, !root, "running as root"}});
}
