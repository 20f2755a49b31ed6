// Assertion helpers shared by the suites (include after doctest).
#pragma once

#include <stdexcept>
#include <string>

namespace jitbmm::test {

// Asserts that `f` throws std::invalid_argument whose message contains `needle` (the argument's name).
template <class F> void expect_invalid(F f, const std::string& needle) {
  try {
    f();
    FAIL("expected std::invalid_argument mentioning '" << needle << "'");
  } catch (const std::invalid_argument& e) {
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

} // namespace jitbmm::test
