#include "cache/key_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

namespace jitbmm {

namespace {

// What the holder wrote, for the waiter's message; "" when unreadable.
std::string holder_of(int fd) {
  char text[64] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string out = got > 0 ? std::string(text, static_cast<std::size_t>(got)) : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

std::string own_holder() { return "pid " + std::to_string(::getpid()); }

} // namespace

std::string KeyLock::holder_words(const std::string& holder) {
  if (holder.empty()) return "another process";
  return holder == own_holder() ? "another thread of this process" : holder;
}

void KeyLock::release() {
  if (fd_.valid() && held() && owner_ == ::getpid()) ::flock(fd_.get(), LOCK_UN);
  fd_ = FileDescriptor();
}

void KeyLock::release_and_remove(int dir_fd, const std::string& name) {
  struct stat held_file = {};
  struct stat named = {};
  if (fd_.valid() && held() && owner_ == ::getpid() && ::fstat(fd_.get(), &held_file) == 0 &&
      ::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && held_file.st_dev == named.st_dev &&
      held_file.st_ino == named.st_ino)
    ::unlinkat(dir_fd, name.c_str(), 0);
  release();
}

KeyLock::KeyLock(KeyLock&& other) noexcept
    : fd_(std::move(other.fd_)), owner_(other.owner_), state_(other.state_), why_(std::move(other.why_)) {}

KeyLock& KeyLock::operator=(KeyLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::move(other.fd_);
    owner_ = other.owner_;
    state_ = other.state_;
    why_ = std::move(other.why_);
  }
  return *this;
}

KeyLock KeyLock::unavailable(std::string why) {
  KeyLock lock;
  lock.why_ = std::move(why);
  return lock;
}

KeyLock KeyLock::acquire(int dir_fd, const std::string& name, std::chrono::milliseconds timeout,
                         const std::function<void(const std::string&)>& on_wait) {
  KeyLock lock;
  lock.fd_ = FileDescriptor(::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock.fd_.valid()) {
    lock.why_ = "cannot open " + name + ": " + std::strerror(errno);
    return lock;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool waited = false;
  for (;;) {
    if (::flock(lock.fd_.get(), LOCK_EX | LOCK_NB) == 0) break;
    if (errno != EWOULDBLOCK && errno != EINTR) {
      lock.why_ = "cannot lock " + name + ": " + std::strerror(errno);
      lock.fd_ = FileDescriptor();
      return lock;
    }
    if (!waited && on_wait) on_wait(holder_of(lock.fd_.get()));
    waited = true;
    if (std::chrono::steady_clock::now() >= deadline) {
      lock.state_ = State::timed_out;
      lock.why_ = "still held by " + holder_of(lock.fd_.get()) + " after " + std::to_string(timeout.count()) + " ms";
      lock.fd_ = FileDescriptor();
      return lock;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string me = own_holder() + "\n";
  if (::ftruncate(lock.fd_.get(), 0) == 0) {
    const ssize_t wrote = ::pwrite(lock.fd_.get(), me.data(), me.size(), 0);
    (void)wrote; // only the waiters' message reads it
  }
  lock.state_ = waited ? State::held_after_waiting : State::held;
  lock.owner_ = ::getpid();
  return lock;
}

} // namespace jitbmm
