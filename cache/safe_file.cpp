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
#include <random>

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

// Why a file with this status may not be read, or an empty string.
std::string refusal(const struct stat& st, uint64_t max_bytes, bool require_owner) {
  if (!S_ISREG(st.st_mode)) return kind_of(st.st_mode);
  if (require_owner && st.st_uid != ::geteuid())
    return "owned by uid " + std::to_string(st.st_uid) + ", not by uid " + std::to_string(::geteuid());
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

std::string unique_suffix() {
  thread_local std::mt19937_64 rng(random_seed());
  char text[32];
  std::snprintf(text, sizeof text, "%d-%016llx", static_cast<int>(::getpid()), static_cast<unsigned long long>(rng()));
  return text;
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

CheckedDir open_checked_dir(const std::string& path, DirTrust trust) {
  CheckedDir out;
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    out.refused = std::strerror(errno);
    return out;
  }
  if (trust == DirTrust::owner_only) {
    if (st.st_uid != ::geteuid())
      out.refused = "owned by uid " + std::to_string(st.st_uid) + ", not by uid " + std::to_string(::geteuid());
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
      out.refused = "writable by group or others, mode " + mode_text(st.st_mode);
  } else if (st.st_mode & S_IWOTH) { // sticky or not: anyone could add an entry
    out.refused = "writable by anyone, mode " + mode_text(st.st_mode);
  }
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
    if (::mkdir(built.c_str(), 0700) != 0 && errno != EEXIST) return built + ": " + std::strerror(errno);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return path + ": not a directory";
  return "";
}

ReadResult read_regular_file(int dir_fd, const std::string& name, uint64_t max_bytes, bool require_owner) {
  ReadResult out;
  struct stat st {};
  // Looked at before opening, so a device is never opened; checked again on the descriptor actually read.
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno != ENOENT) out = {ReadResult::refused, "", std::strerror(errno)};
    return out;
  }
  if (std::string why = refusal(st, max_bytes, require_owner); !why.empty()) return {ReadResult::refused, "", why};
  FileDescriptor fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return out;
    return {ReadResult::refused, "", errno == ELOOP ? "a symbolic link" : std::strerror(errno)};
  }
  if (::fstat(fd.get(), &st) != 0) return {ReadResult::refused, "", std::strerror(errno)};
  if (std::string why = refusal(st, max_bytes, require_owner); !why.empty()) return {ReadResult::refused, "", why};
  out.bytes.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  for (;;) {
    if (done == out.bytes.size()) { // the file may have grown since fstat: read on, within the bound
      if (done > max_bytes) return {ReadResult::refused, "", "larger than " + std::to_string(max_bytes) + " bytes"};
      out.bytes.resize(done + std::min<uint64_t>(max_bytes + 1 - done, 1 << 16));
    }
    const ssize_t n = ::read(fd.get(), out.bytes.data() + done, out.bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return {ReadResult::refused, "", std::strerror(errno)};
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
    temp = ".tmp-" + name + "-" + unique_suffix();
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

} // namespace jitbmm
