// Only in the binaries that link libstdc++ statically (libjitbmm_c.so, the wheel's CLI). Any use of std::logic_error
// or std::runtime_error takes in libstdc++.a's stdexcept.o, which takes in the copy-on-write string objects, which
// take in random.o (std::random_device), which calls arc4random: a glibc 2.36 function. jitbmm never constructs a
// std::random_device, so that call never happens, but the reference alone would make the binaries refuse to load
// on glibc 2.34 and 2.35 (RHEL 9, Ubuntu 22.04) and the wheel manylinux_2_36. This definition satisfies the reference
// inside the binary, hidden so that it is never exported and never replaces glibc's for anyone else; the highest
// glibc the binaries then need is 2.34 (dlopen and the pthread functions moved into libc there), which
// tests/link/glibc_floor.sh checks.
#include <errno.h>
#include <sys/random.h>
#include <time.h>

#include <cstdint>

extern "C" __attribute__((visibility("hidden"))) std::uint32_t arc4random(void) {
  std::uint32_t value = 0;
  for (;;) {
    const ssize_t got = getrandom(&value, sizeof value, 0);
    if (got == static_cast<ssize_t>(sizeof value)) return value;
    if (got < 0 && errno != EINTR) break; // no getrandom (a kernel before 3.17): the clock, as a last resort
  }
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::uint32_t>(now.tv_nsec) ^ static_cast<std::uint32_t>(now.tv_sec * 2654435761u);
}
