// The GPU suite's parallel reference checks (tests/parallel_rows.hpp): every row once, results merged in row order,
// exceptions carried back.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel_rows.hpp"

using jitbmm::test::check_rows_in_parallel;

namespace {

struct Tally {
  int64_t checked = 0, failures = 0;
  std::string first;
};
void merge(Tally& into, const Tally& part) {
  into.checked += part.checked, into.failures += part.failures;
  if (into.first.empty()) into.first = part.first;
}

} // namespace

TEST_CASE("parallel row checks: every row once, counts added, the first failure the first row's") {
  for (const int64_t rows : {0, 1, 2, 7, 1000})
    for (const unsigned threads : {1u, 2u, 3u, 16u, 0u}) {
      CAPTURE(rows);
      CAPTURE(threads);
      std::vector<std::atomic<int>> seen(static_cast<std::size_t>(rows));
      const Tally t = check_rows_in_parallel<Tally>(
          rows,
          [&](int64_t first, int64_t last, Tally& r) {
            for (int64_t row = first; row < last; ++row) {
              ++seen[static_cast<std::size_t>(row)];
              ++r.checked;
              if (row % 97 == 5) { // failures at rows 5, 102, 199, ...
                ++r.failures;
                if (r.first.empty()) r.first = "row " + std::to_string(row);
              }
            }
          },
          merge, threads);
      CHECK(t.checked == rows);
      for (const std::atomic<int>& s : seen) CHECK(s.load() == 1);
      CHECK(t.failures == (rows > 5 ? (rows - 6) / 97 + 1 : 0));
      CHECK(t.first == (rows > 5 ? "row 5" : ""));
    }
}

TEST_CASE("parallel row checks: an exception in any range is rethrown after every range ends") {
  std::atomic<int64_t> done{0};
  CHECK_THROWS_WITH_AS(check_rows_in_parallel<Tally>(
                           100,
                           [&](int64_t first, int64_t last, Tally&) {
                             for (int64_t row = first; row < last; ++row) {
                               if (row == 60) throw std::invalid_argument("row 60");
                               ++done;
                             }
                           },
                           merge, 4),
                       "row 60", std::invalid_argument);
  CHECK(done.load() == 85); // every row but 60..74 (its range stopped there)
}
