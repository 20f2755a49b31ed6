// The fake driver's log ($JITBMM_FAKE_CUDA_LOG) as the fake-driver tests read it: the launches ("launch <kernel>
// grid=<x>,<y>,<z> block=..." lines, " programmatic" at the end of a dependent one) and a log of their own while a
// test looks.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.hpp"

namespace jitbmm::test {

struct LoggedLaunch {
  std::string kernel;
  unsigned grid_x = 0;
  bool programmatic = false; // through cuLaunchKernelEx, allowed to overlap the end of the kernel before it
  unsigned cluster = 0;      // through cuLaunchKernelEx, its blocks clusters of this many
  bool operator==(const LoggedLaunch& o) const { return kernel == o.kernel && grid_x == o.grid_x; }
};

// The launches in the log at `path` of a kernel whose name ends with `suffix` (every launch for ""), in order.
inline std::vector<LoggedLaunch> logged_launches(const std::string& path, const std::string& suffix = "") {
  std::ifstream in(path);
  std::vector<LoggedLaunch> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string word, kernel, grid;
    if (!(words >> word >> kernel) || word != "launch" || kernel.size() < suffix.size() ||
        kernel.compare(kernel.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const bool has_grid = (words >> grid) && grid.rfind("grid=", 0) == 0;
    const bool programmatic = line.find(" programmatic") != std::string::npos;
    const std::size_t cluster = line.find(" cluster=");
    out.push_back(LoggedLaunch{kernel, has_grid ? unsigned(std::stoul(grid.substr(5))) : 0u, programmatic,
                               cluster == std::string::npos ? 0u : unsigned(std::stoul(line.substr(cluster + 9)))});
  }
  return out;
}

// The driver's log in a directory of its own while it lives.
struct DriverLog {
  TempDir dir;
  std::string path = dir.path + "/driver.log";
  DriverLog() { ::setenv("JITBMM_FAKE_CUDA_LOG", path.c_str(), 1); }
  ~DriverLog() { ::unsetenv("JITBMM_FAKE_CUDA_LOG"); }
  DriverLog(const DriverLog&) = delete;
  DriverLog& operator=(const DriverLog&) = delete;
  std::vector<LoggedLaunch> launches(const std::string& suffix = "") const { return logged_launches(path, suffix); }
  // How many modules were loaded.
  std::size_t loads() const {
    std::ifstream in(path);
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) n += line.rfind("load ", 0) == 0;
    return n;
  }
  // The kernels launched, in order.
  std::vector<std::string> launched() const {
    std::vector<std::string> out;
    for (const LoggedLaunch& l : launches()) out.push_back(l.kernel);
    return out;
  }
  // The grid's x of each launch of a kernel whose name ends with `suffix`, in order.
  std::vector<unsigned> grids(const std::string& suffix) const {
    std::vector<unsigned> out;
    for (const LoggedLaunch& l : launches(suffix)) out.push_back(l.grid_x);
    return out;
  }
};

} // namespace jitbmm::test
