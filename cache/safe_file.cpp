#include "cache/safe_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <optional>
#include <random>
#include <sstream>

#include "support/sha256.hpp"

namespace jitbmm {

namespace {

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

// Why `trust` refuses a directory or file with this status (its owner or who may write it), or an empty string.
std::string untrusted(const struct stat& st, OwnerTrust trust) {
  const bool root_may_own = trust == OwnerTrust::owner_or_root;
  if (st.st_uid != ::geteuid() && !(root_may_own && st.st_uid == 0))
    return "owned by uid " + std::to_string(st.st_uid) + ", not by uid " + std::to_string(::geteuid()) +
           (root_may_own && ::geteuid() != 0 ? " or root" : "");
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "writable by group or others, mode " + mode_text(st.st_mode);
  return "";
}

// Why a file with this status may not be read, or an empty string.
std::string refusal(const struct stat& st, uint64_t max_bytes, OwnerTrust trust) {
  if (!S_ISREG(st.st_mode)) return kind_of(st.st_mode);
  if (std::string why = untrusted(st, trust); !why.empty()) return why;
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return "larger than " + std::to_string(max_bytes) + " bytes";
  return "";
}

// The seed comes from getrandom (glibc 2.25), not std::random_device, whose libstdc++ object needs glibc 2.36's
// arc4random once linked in statically (libjitbmm_c.so, the wheel's CLI); the pid and the clock are the fallback.
std::uint64_t random_seed() {
  std::uint64_t seed = 0;
  if (::getrandom(&seed, sizeof seed, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof seed)) return seed;
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         (static_cast<std::uint64_t>(::getpid()) << 32);
}

// Which boot of which machine, and which pid namespace, this process runs in: pids and start times mean something
// only within both. Empty when /proc does not say.
const std::string& machine_tag() {
  // never destroyed: a background build may still use it as the process exits
  static const std::string& tag = *new std::string([] {
    // A /proc of another pid namespace (mounted before an unshare) would name other processes by our pids.
    char self[32];
    const ssize_t self_chars = ::readlink("/proc/self", self, sizeof self);
    if (self_chars <= 0 || std::string(self, static_cast<std::size_t>(self_chars)) != std::to_string(::getpid()))
      return std::string();
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    std::getline(boot, boot_id);
    char ns[128];
    const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof ns);
    if (boot_id.empty() || n <= 0) return std::string();
    return sha256_hex(boot_id + '\n' + std::string(ns, static_cast<std::size_t>(n))).substr(0, 12);
  }());
  return tag;
}

struct ProcessStart {
  unsigned long long ticks = 0; // field 22 of /proc/<pid>/stat: clock ticks from boot to the process's start
  bool running = false;         // not a zombie (which has exited and only waits for its parent)
};

// Nothing when /proc has no process `pid`.
std::optional<ProcessStart> process_start(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  const std::size_t comm_end = stat.rfind(')'); // the command name (field 2) may hold spaces and parentheses
  if (comm_end == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(comm_end + 1));
  std::string state, skipped;
  fields >> state; // field 3
  for (int field = 4; field < 22; ++field) fields >> skipped;
  ProcessStart out;
  if (!(fields >> out.ticks)) return std::nullopt;
  out.running = state != "Z" && state != "X";
  return out;
}

// <pid>.<start>.<machine tag>, or <pid> alone where /proc does not say.
std::string writer_id() {
  const long pid = ::getpid();
  const std::optional<ProcessStart> start = machine_tag().empty() ? std::nullopt : process_start(pid);
  if (!start) return std::to_string(pid);
  return std::to_string(pid) + "." + std::to_string(start->ticks) + "." + machine_tag();
}

std::optional<unsigned long long> decimal(const std::string& text) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoull(text);
}

} // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

CheckedDir open_checked_dir(const std::string& path, OwnerTrust trust) {
  CheckedDir out;
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    out.refused = std::strerror(errno);
    return out;
  }
  out.refused = untrusted(st, trust);
  if (out.refused.empty()) out.fd = std::move(fd);
  return out;
}

std::string make_private_dirs(const std::string& path) {
  if (path.empty()) return "empty path";
  std::string built;
  std::size_t at = 0;
  while (at != std::string::npos) {
    const std::size_t slash = path.find('/', at + 1);
    built = path.substr(0, slash);
    at = slash;
    if (built.empty() || built == "/") continue;
    struct stat existing {};
    if (::stat(built.c_str(), &existing) == 0) continue;
    // Root makes no directory in another user's (sudo with the user's HOME): it would be root's, and the user's own
    // runs could then neither use nor remove it.
    const std::size_t cut = built.rfind('/');
    const std::string parent = cut == 0 ? "/" : built.substr(0, cut);
    struct stat above {};
    if (::geteuid() == 0 && cut != std::string::npos && ::stat(parent.c_str(), &above) == 0 && above.st_uid != 0)
      return built + ": not made by root in " + parent + ", which uid " + std::to_string(above.st_uid) +
             " owns (set JITBMM_CACHE_DIR to a directory of root's, or run as that user)";
    if (::mkdir(built.c_str(), 0700) != 0 && errno != EEXIST) return built + ": " + std::strerror(errno);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return path + ": not a directory";
  return "";
}

ReadResult read_regular_file(int dir_fd, const std::string& name, uint64_t max_bytes, OwnerTrust trust) {
  ReadResult out;
  struct stat st {};
  // Looked at before opening, so a device is never opened; checked again on the descriptor actually read.
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT) out = {ReadResult::unreadable, "", std::strerror(errno)};
    return out;
  }
  if (std::string why = refusal(st, max_bytes, trust); !why.empty())
    return {ReadResult::refused, "", why, st.st_dev, st.st_ino};
  FileDescriptor fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return out;
    if (errno == ELOOP) return {ReadResult::refused, "", "a symbolic link"}; // swapped in since fstatat
    // A file the owner may not read (EACCES, EPERM) is one jitbmm did not write; anything else is the system's.
    const bool refused = errno == EACCES || errno == EPERM;
    return {refused ? ReadResult::refused : ReadResult::unreadable, "", std::strerror(errno)};
  }
  if (::fstat(fd.get(), &st) != 0) return {ReadResult::unreadable, "", std::strerror(errno)};
  if (std::string why = refusal(st, max_bytes, trust); !why.empty())
    return {ReadResult::refused, "", why, st.st_dev, st.st_ino};
  out.device = st.st_dev;
  out.inode = st.st_ino;
  // No memory for the file's bytes is the system's state, as an I/O error is: a miss, the entry left in place.
  const auto grow = [&](std::size_t n) {
    try {
      out.bytes.resize(n);
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  };
  const ReadResult no_memory{ReadResult::unreadable, "", std::strerror(ENOMEM)};
  if (!grow(static_cast<std::size_t>(st.st_size))) return no_memory;
  std::size_t done = 0;
  for (;;) {
    if (done == out.bytes.size()) { // the file may have grown since fstat: read on, within the bound
      if (done > max_bytes) return {ReadResult::refused, "", "larger than " + std::to_string(max_bytes) + " bytes"};
      if (!grow(done + std::min<uint64_t>(max_bytes + 1 - done, 1 << 16))) return no_memory;
    }
    const ssize_t n = ::read(fd.get(), out.bytes.data() + done, out.bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return {ReadResult::unreadable, "", std::strerror(errno)};
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  out.bytes.resize(done);
  out.status = ReadResult::ok;
  return out;
}

std::string write_file_atomically(int dir_fd, const std::string& name, std::string_view bytes) {
  std::string temp;
  FileDescriptor fd;
  for (int attempt = 0; attempt < 16 && !fd.valid(); ++attempt) {
    temp = temp_file_name(name);
    fd = FileDescriptor(
        ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, S_IRUSR | S_IWUSR));
    if (!fd.valid() && errno != EEXIST) break;
  }
  if (!fd.valid()) return std::strerror(errno);
  std::string error;
  for (std::size_t done = 0; error.empty() && done < bytes.size();) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      error = n < 0 ? std::strerror(errno) : "short write";
    else
      done += static_cast<std::size_t>(n);
  }
  if (error.empty() && ::fsync(fd.get()) != 0) error = std::strerror(errno);
  if (::close(fd.release()) != 0 && error.empty()) error = std::strerror(errno);
  if (error.empty() && ::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) error = std::strerror(errno);
  if (!error.empty()) ::unlinkat(dir_fd, temp.c_str(), 0);
  return error;
}

std::string temp_file_name(const std::string& name) {
  thread_local std::mt19937_64 rng(random_seed());
  char random[24];
  std::snprintf(random, sizeof random, "%016llx", static_cast<unsigned long long>(rng()));
  return ".tmp-" + name + "-" + writer_id() + "-" + random;
}

bool temp_writer_gone(const std::string& temp_name) {
  const std::size_t random_dash = temp_name.rfind('-');
  if (random_dash == std::string::npos || random_dash == 0) return false;
  const std::size_t writer_dash = temp_name.rfind('-', random_dash - 1);
  if (writer_dash == std::string::npos) return false;
  const std::string writer = temp_name.substr(writer_dash + 1, random_dash - writer_dash - 1);
  const std::size_t dot = writer.find('.');
  if (dot == std::string::npos) return false; // <pid> alone: /proc could not say who wrote it
  const std::size_t tag_dot = writer.find('.', dot + 1);
  if (tag_dot == std::string::npos || machine_tag().empty() || writer.substr(tag_dot + 1) != machine_tag())
    return false;
  const auto pid = decimal(writer.substr(0, dot)), ticks = decimal(writer.substr(dot + 1, tag_dot - dot - 1));
  if (!pid || !ticks || *pid == 0 || *pid > 1u << 30) return false;
  const std::optional<ProcessStart> now = process_start(static_cast<long>(*pid));
  return !now || !now->running || now->ticks != *ticks; // exited, or its pid now names another process
}

} // namespace jitbmm
