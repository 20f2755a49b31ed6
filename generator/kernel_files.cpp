#include "generator/kernel_files.hpp"

#include "runtime/log.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

namespace jitbmm {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void note_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(message).second) log_message(LogLevel::warn, message);
}

bool write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out.flush());
}

} // namespace

GeneratedKernel with_override(GeneratedKernel kernel) {
  const std::string dir = env("JITBMM_OVERRIDE_DIR");
  if (dir.empty()) return kernel;
  const std::string path = dir + "/" + kernel.name + ".cu";
  std::ifstream in(path, std::ios::binary);
  if (!in) return kernel;
  std::ostringstream text;
  text << in.rdbuf();
  kernel.source = text.str();
  note_once("JITBMM_OVERRIDE_DIR is active: kernel " + kernel.name + " is compiled from " + path);
  return kernel;
}

bool dump_requested() { return !env("JITBMM_DUMP_DIR").empty(); }

bool dump_kernel(const GeneratedKernel& kernel, const std::string& ptx) {
  const std::string dir = env("JITBMM_DUMP_DIR");
  if (dir.empty()) return false;
  ::mkdir(dir.c_str(), 0755);
  bool ok = write_text(dir + "/" + kernel.name + ".cu", kernel.source);
  if (!ptx.empty()) ok = write_text(dir + "/" + kernel.name + ".ptx", ptx) && ok;
  if (!ok) note_once("warning: JITBMM_DUMP_DIR " + dir + " is not writable; kernels are not dumped");
  return true;
}

} // namespace jitbmm
