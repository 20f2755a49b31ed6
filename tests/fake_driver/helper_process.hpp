// The fake-driver test program run again as a helper process (with arguments that select a helper mode and an
// environment of its own): what a test needs when the state it checks is fixed once a process, such as the device's
// description (JITBMM_FEATURES, the fake's compute capability) or the NVRTC library loaded.
#pragma once

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace jitbmm::test {

struct HelperRun {
  int status = -1;
  std::string output; // stdout
};

// This executable run as a helper: `args` after the program name, the variables of `env` set, its stdout (and with
// `with_stderr` its stderr) captured; status is its exit status (128 + signal when killed).
inline HelperRun run_helper(std::vector<std::string> args, const std::vector<std::pair<std::string, std::string>>& env,
                            bool with_stderr = false) {
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    if (with_stderr) ::dup2(out[1], 2);
    ::close(out[0]);
    ::close(out[1]);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv = {const_cast<char*>("/proc/self/exe")};
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  HelperRun r;
  char buffer[4096];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) r.output.append(buffer, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The line of a helper's `output` that starts with `name` and a space, without them ("(no line <name>)" if none).
inline std::string line_of(const std::string& output, const std::string& name) {
  const std::size_t at = output.rfind(name + " ", 0) == 0 ? 0 : output.find("\n" + name + " ");
  if (at == std::string::npos) return "(no line " + name + ")";
  const std::size_t from = output.find(' ', at + (at ? 1 : 0)) + 1;
  return output.substr(from, output.find('\n', from) - from);
}

// The helper modes of test_arch_levels.cpp (main dispatches to it): "--device-level" and "--old-device".
int arch_level_helper(const std::string& mode);
// The helper modes of test_stand_in.cpp: "--stand-in calls" and "--stand-in capture".
int stand_in_helper(const std::string& mode);
// The helper mode of test_context_reset.cpp: "--context-reset".
int context_reset_helper();

} // namespace jitbmm::test
