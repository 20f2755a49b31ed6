// What a test case needs beyond the machine its suite runs on, named as the doctest test suite it joins:
//   TEST_CASE("an entry owned by another user is a miss" * doctest::test_suite(test::kNeedsRoot)) { ... }
// The suite's main (suite_main.hpp) leaves out the cases whose need is not met here before anything runs, so doctest
// counts them as skipped, never passed, and the main names them and the need. A case never returns early instead.
#pragma once

namespace jitbmm::test {

constexpr const char* kNeedsRoot = "needs_root";          // chown to another user (uid 65534)
constexpr const char* kNeedsNonRoot = "needs_non_root";   // file permissions, which bind everyone but root
constexpr const char* kNeedsDiskCache = "needs_disk_cache"; // the process's disk cache (off under JITBMM_CACHE=off)
// Clusters of blocks: a GPU of sm_90 or later, at a feature level (JITBMM_FEATURES) that keeps them
constexpr const char* kNeedsClusters = "needs_clusters";
// TF32 and BF16 mma.sync (sm_80 or later, at a level that keeps them): exp_matmul's tensor-core defaults
constexpr const char* kNeedsMmaTf32Bf16 = "needs_mma_tf32_bf16";

} // namespace jitbmm::test
