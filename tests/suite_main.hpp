// The end of a suite's main: runs doctest without the test cases whose need (needs.hpp) is not met here. doctest's
// summary counts them as skipped and each is named with its need; a run in which every selected case was left out
// exits 77, which ctest reports as skipped (SKIP_RETURN_CODE), never passed. Include in the main's file only: it
// registers a doctest listener.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "needs.hpp"

namespace jitbmm::test {

struct Need {
  const char* suite; // needs.hpp's kNeeds*
  bool met;
  const char* why;   // said when unmet: "not running as root"
};

namespace suite_main {

inline std::map<std::string, std::string>& unmet() { // suite → why
  static std::map<std::string, std::string> m;
  return m;
}
inline unsigned& cases_run() {
  static unsigned n = 0;
  return n;
}

// Names each case left out for an unmet need, and counts the cases that passed the filters (ran).
struct NeedsListener : doctest::IReporter {
  explicit NeedsListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override { cases_run() = stats.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData& tc) override {
    const auto it = unmet().find(tc.m_test_suite);
    if (it != unmet().end())
      std::printf("SKIPPED: \"%s\": %s (%s)\n", tc.m_name, it->second.c_str(), it->first.c_str());
  }
};
REGISTER_LISTENER("jitbmm_needs", 1, NeedsListener);

} // namespace suite_main

inline int run_suite(doctest::Context& context, const std::vector<Need>& needs) {
  for (const Need& n : needs)
    if (!n.met) {
      context.addFilter("test-suite-exclude", n.suite);
      suite_main::unmet()[n.suite] = n.why;
    }
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;
  return suite_main::cases_run() == 0 && !suite_main::unmet().empty() ? 77 : 0;
}

} // namespace jitbmm::test
