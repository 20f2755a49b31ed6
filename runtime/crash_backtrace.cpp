// The crash handler of $JITBMM_CRASH_BACKTRACE, installed as the library loads (every process that loads jitbmm,
// the C ABI's host processes among them, reads the variable once).
#include <dlfcn.h>
#include <execinfo.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "support/parse_number.hpp"

namespace {

// $JITBMM_CRASH_BACKTRACE=1: on SIGSEGV/SIGBUS/SIGABRT, print the native stack to stderr (for a crash inside a host
// process such as Python, where no debugger is at hand), then die with the signal as before.
void crash_backtrace(int sig, siginfo_t* info, void* context) {
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  char line[256];
  const auto* uc = static_cast<const ucontext_t*>(context);
  const auto pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  Dl_info where{};
  ::dladdr(pc, &where);
  const int len = std::snprintf(line, sizeof line, "jitbmm: fatal signal %d at address %p, pc %p (%s+%p)\n", sig,
                                info->si_addr, pc, where.dli_fname ? where.dli_fname : "?",
                                reinterpret_cast<void*>(static_cast<char*>(pc) - static_cast<char*>(where.dli_fbase)));
  (void)!::write(2, line, static_cast<std::size_t>(len));
  if (!pc) { // a call through a null pointer: the caller's return address is on top of the stack
    void* ret = *reinterpret_cast<void* const*>(uc->uc_mcontext.gregs[REG_RSP]);
    Dl_info caller{};
    ::dladdr(ret, &caller);
    const int k = std::snprintf(line, sizeof line, "jitbmm: called from %p (%s+%p, %s)\n", ret,
                                caller.dli_fname ? caller.dli_fname : "?",
                                reinterpret_cast<void*>(static_cast<char*>(ret) - static_cast<char*>(caller.dli_fbase)),
                                caller.dli_sname ? caller.dli_sname : "?");
    (void)!::write(2, line, static_cast<std::size_t>(k));
  }
  ::backtrace_symbols_fd(frames, n, 2);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

const bool g_backtrace_installed = [] {
  bool on = false;
  try { // a static initialiser must not throw: a bad value is a warning, and the handler stays off
    on = jitbmm::env_integer("JITBMM_CRASH_BACKTRACE", 0, 1).value_or(0) == 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "jitbmm: warning: %s; crash backtraces off\n", e.what());
  }
  if (!on) return false;
  struct sigaction action {};
  action.sa_sigaction = crash_backtrace;
  action.sa_flags = SA_SIGINFO;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT}) ::sigaction(sig, &action, nullptr);
  return true;
}();

} // namespace
