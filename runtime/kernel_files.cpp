#include "runtime/kernel_files.hpp"

#include "support/log.hpp"

#include <cstdlib>

#include "cache/safe_file.hpp"

namespace jitbmm {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void note_once(const std::string& message) { warn_once(message, message); }

} // namespace

GeneratedKernel with_override(GeneratedKernel kernel) {
  const std::string dir = env("JITBMM_OVERRIDE_DIR");
  if (dir.empty()) return kernel;
  // Whatever is read here is compiled and run: only from a directory, and a file, that only the user can feed.
  const CheckedDir checked = open_checked_dir(dir, OwnerTrust::owner_only);
  if (!checked.fd.valid()) {
    note_once("JITBMM_OVERRIDE_DIR " + dir + " is not trusted (" + checked.refused + "); it is ignored");
    return kernel;
  }
  const std::string name = kernel.name + ".cu";
  ReadResult r = read_regular_file(checked.fd.get(), name, kMaxSourceBytes, OwnerTrust::owner_only);
  if (r.status == ReadResult::absent) return kernel;
  if (r.status != ReadResult::ok) {
    note_once("JITBMM_OVERRIDE_DIR file " + dir + "/" + name + " is " +
              (r.status == ReadResult::refused ? "refused" : "unreadable") + " (" + r.why + "); it is ignored");
    return kernel;
  }
  kernel.source = std::move(r.bytes);
  kernel.waits_for_prior_grids = false; // the user's text need not wait for the kernel before it: plain launches
  note_once("JITBMM_OVERRIDE_DIR is active: kernel " + kernel.name + " is compiled from " + dir + "/" + name);
  return kernel;
}

bool dump_requested() { return !env("JITBMM_DUMP_DIR").empty(); }

bool dump_kernel(const GeneratedKernel& kernel, const std::string& ptx) {
  const std::string dir = env("JITBMM_DUMP_DIR");
  if (dir.empty()) return false;
  std::string error = make_private_dirs(dir);
  if (!error.empty()) {
    note_once("JITBMM_DUMP_DIR " + dir + " is not usable (" + error + "); kernels are not dumped");
    return true;
  }
  const CheckedDir checked = open_checked_dir(dir, OwnerTrust::owner_only);
  if (!checked.fd.valid()) {
    note_once("JITBMM_DUMP_DIR " + dir + " is not trusted (" + checked.refused + "); kernels are not dumped");
    return true;
  }
  // A fresh file renamed over each name: a link planted there is replaced, never written through.
  // A quick build's PTX (GeneratedKernel::quick) beside the optimised build's, of the same source and name.
  error = write_file_atomically(checked.fd.get(), kernel.name + ".cu", kernel.source);
  if (error.empty() && !ptx.empty())
    error = write_file_atomically(checked.fd.get(), kernel.name + (kernel.quick ? ".quick.ptx" : ".ptx"), ptx);
  if (!error.empty()) note_once("JITBMM_DUMP_DIR " + dir + " is not writable (" + error + "); kernels are not dumped");
  return true;
}

} // namespace jitbmm
