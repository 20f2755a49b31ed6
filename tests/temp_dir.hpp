// A fresh private directory under the system temp dir (mkdtemp: mode 0700, so the disk cache trusts it), removed
// with everything in it when the object goes, whatever modes a test left on it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

struct TempDir {
  std::string path;
  explicit TempDir(const char* prefix = "jitbmm-test") {
    std::string templ = (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    path = ::mkdtemp(templ.data());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path, ec);
  }
};
