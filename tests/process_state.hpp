// Parts of the process a test changes for one scope and then restores: an environment variable, and stderr (where
// warnings go) captured to be read.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

namespace jitbmm::test {

// A variable set (or, given nullptr, unset) for one scope, then restored.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ScopedEnv(const char* name, const std::string& value) : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() {
    if (saved_)
      ::setenv(name_.c_str(), saved_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  std::string name_;
  std::optional<std::string> saved_;
};

// Everything written to stderr while it lives.
class CapturedStderr {
public:
  CapturedStderr() : file_(std::tmpfile()), saved_(::dup(2)) {
    // Where the temporary directory refuses the process (a child that became another user, say), say so here
    // rather than crash on the missing file.
    if (!file_) {
      const std::string why = std::strerror(errno);
      ::close(saved_);
      throw std::runtime_error("CapturedStderr: tmpfile(): " + why);
    }
    std::fflush(stderr);
    ::dup2(::fileno(file_), 2);
  }
  ~CapturedStderr() {
    restore();
    std::fclose(file_);
  }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;
  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    for (int c; (c = std::fgetc(file_)) != EOF;) out.push_back(static_cast<char>(c));
    return out;
  }
  int warnings() {
    const std::string t = text();
    int n = 0;
    for (std::size_t at = t.find("warning:"); at != std::string::npos; at = t.find("warning:", at + 1)) ++n;
    return n;
  }

private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_;
};

} // namespace jitbmm::test
