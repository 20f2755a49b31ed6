// One holder at a time per key among every process and thread of the machine that shares a cache directory: an
// advisory flock(2) on the file lock-<key> in that directory (DiskCache::lock). The kernel releases the lock when its
// holder's descriptor closes, so a process that exits or is killed never leaves a stale lock to break. The files
// stay: removing one that is held or awaited would let a second holder in through a new file. They are not cache
// entries (never listed, verified or evicted).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <sys/types.h>

#include "cache/safe_file.hpp"

namespace jitbmm {

class KeyLock {
public:
  enum class State { held, held_after_waiting, timed_out, failed };

  // Takes the lock on `name` in `dir_fd` (created 0600 if absent, never through a link), waiting up to `timeout`.
  // When another holds it, `on_wait(holder)` is called once, with what that holder wrote ("pid 1234"). The holder
  // then writes its own pid into the file.
  static KeyLock acquire(int dir_fd, const std::string& name, std::chrono::milliseconds timeout,
                         const std::function<void(const std::string& holder)>& on_wait = {});

  // Who holds a lock, for a message, from what the holder wrote (on_wait's argument): "pid 1234"; "another thread of
  // this process" when that is this process's pid (flock excludes each open of the file, so threads of one process
  // exclude each other too); "another process" when nothing could be read.
  static std::string holder_words(const std::string& holder);

  // No lock: the cache cannot hold one (read-only, unusable); `why` says so.
  static KeyLock unavailable(std::string why);

  State state() const { return state_; }
  bool held() const { return state_ == State::held || state_ == State::held_after_waiting; }
  bool waited() const { return state_ == State::held_after_waiting || state_ == State::timed_out; }
  const std::string& why() const { return why_; }      // when failed: what failed

  // Lets go (also on destruction): unlocks, then closes. A forked child shares the lock's open file, so closing alone
  // would leave the lock held for as long as the child lives; the unlock frees it for every copy. A copy of a
  // KeyLock in a forked child only closes its descriptor: the lock stays the parent's.
  void release();
  // Lets go as release() does, and first removes the lock's file where it is still the one at `name` in `dir_fd`,
  // for locks whose exclusion only saves work (a compile another process would repeat), whose files would otherwise
  // gather one a key. A waiter that opened the file before it went gets the lock after, on the removed file, while a
  // newcomer makes a new one: two holders at once, which such a lock allows.
  void release_and_remove(int dir_fd, const std::string& name);

  KeyLock() = default;
  ~KeyLock() { release(); }
  KeyLock(KeyLock&& other) noexcept;
  KeyLock& operator=(KeyLock&& other) noexcept;

private:
  FileDescriptor fd_;
  pid_t owner_ = 0; // the process that took it
  State state_ = State::failed;
  std::string why_;
};

} // namespace jitbmm
