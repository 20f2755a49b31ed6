// The machine-wide tuning lock (cache/key_lock.hpp): one holder at a time per key across threads and processes, a
// waiter told who holds it, a bounded wait, no stale lock after its holder is killed, and lock files that are no
// cache entries (the compile lock's go with their holders). And this process's share of the machine
// (support/process_share.hpp) under a launcher's variables, and the tuner's CPU pool (runtime/tuner/cpu_pool.hpp),
// whose extra threads each need one of the machine's tokens.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cache/disk_cache.hpp"
#include "cache/key_lock.hpp"
#include "runtime/tuner/cpu_pool.hpp"
#include "runtime/tuner/once_per_key.hpp"
#include "support/log.hpp"
#include "support/process_share.hpp"
#include "process_state.hpp"
#include "temp_dir.hpp"

using namespace jitbmm;
using jitbmm::test::ScopedEnv;
using namespace std::chrono_literals;

namespace {

const std::string kKey(64, 'a');

int open_dir(const std::string& path) { return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

} // namespace

TEST_CASE("a key lock is held by one at a time; a waiter learns the holder's pid, and gives up at its deadline") {
  TempDir dir;
  const int fd = open_dir(dir.path);
  REQUIRE(fd >= 0);
  KeyLock first = KeyLock::acquire(fd, "lock-x", 1s);
  REQUIRE(first.state() == KeyLock::State::held);
  CHECK_FALSE(first.waited());
  std::string holder;
  int announced = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const KeyLock second = KeyLock::acquire(fd, "lock-x", 150ms, [&](const std::string& h) {
    holder = h;
    ++announced;
  });
  CHECK(std::chrono::steady_clock::now() - t0 >= 150ms);
  CHECK(second.state() == KeyLock::State::timed_out);
  CHECK_FALSE(second.held());
  CHECK(announced == 1);
  CHECK(holder == "pid " + std::to_string(::getpid()));
  // This process's own pid is no other process to wait for: the message names another thread.
  CHECK(KeyLock::holder_words(holder) == "another thread of this process");
  CHECK(KeyLock::holder_words("pid " + std::to_string(::getpid() + 1)) == "pid " + std::to_string(::getpid() + 1));
  CHECK(KeyLock::holder_words("") == "another process");
  CHECK(second.why().find("still held by pid") != std::string::npos);
  // Another key is free meanwhile.
  CHECK(KeyLock::acquire(fd, "lock-y", 0ms).state() == KeyLock::State::held);
  // Released: the next one takes it after waiting.
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    first.release();
  });
  const KeyLock third = KeyLock::acquire(fd, "lock-x", 5s);
  later.join();
  CHECK(third.state() == KeyLock::State::held_after_waiting);
  // A link planted at the name is not followed.
  REQUIRE(::symlinkat("/tmp/elsewhere", fd, "lock-link") == 0);
  const KeyLock linked = KeyLock::acquire(fd, "lock-link", 0ms);
  CHECK(linked.state() == KeyLock::State::failed);
  CHECK(linked.why().find("cannot open lock-link") != std::string::npos);
  ::close(fd);
}

TEST_CASE("a key lock released while a forked child lives is free at once; the child's copy never unlocks it") {
  TempDir dir;
  const int fd = open_dir(dir.path);
  REQUIRE(fd >= 0);
  KeyLock lock = KeyLock::acquire(fd, "lock-fork", 1s);
  REQUIRE(lock.held());
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork(); // shares the lock's open file, as a DataLoader worker forked mid-tuning would
  REQUIRE(child >= 0);
  if (child == 0) {
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::sleep(5);
    ::_exit(0);
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  lock.release();
  CHECK(KeyLock::acquire(fd, "lock-fork", 0ms).state() == KeyLock::State::held);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // A forked child that lets go of its copy leaves the parent's lock held.
  KeyLock parents = KeyLock::acquire(fd, "lock-again", 1s);
  REQUIRE(parents.held());
  const pid_t second = ::fork();
  REQUIRE(second >= 0);
  if (second == 0) {
    parents.release();
    ::_exit(KeyLock::acquire(fd, "lock-again", 0ms).held() ? 1 : 0);
  }
  int status = -1;
  ::waitpid(second, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::close(ready[0]);
  ::close(ready[1]);
  ::close(fd);
}

TEST_CASE("one tuning per process and key: threads that come while it runs, or after, get its outcome") {
  OncePerKey<int> tunings;
  std::atomic<int> runs{0}, waits{0};
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  const auto slow_tuning = [&] {
    ++runs;
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return release; });
    return 42;
  };
  std::thread first([&] { CHECK(tunings.get("key", slow_tuning) == 42); });
  while (runs.load() == 0) std::this_thread::sleep_for(1ms);
  std::vector<std::thread> waiters;
  std::atomic<int> got{0};
  for (int i = 0; i < 3; ++i)
    waiters.emplace_back([&] { got += tunings.get("key", slow_tuning, [&] { ++waits; }); });
  while (waits.load() < 3) std::this_thread::sleep_for(1ms); // each announced it waits, none tunes
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  cv.notify_all();
  first.join();
  for (std::thread& t : waiters) t.join();
  CHECK(runs == 1);
  CHECK(got == 3 * 42);
  CHECK(tunings.get("key", [] { return 7; }, [&] { ++waits; }) == 42); // later: at once, no wait announced
  CHECK(waits == 3);
  CHECK(tunings.get("other key", [] { return 7; }) == 7);

  // A failed tuning is its outcome: thrown again to whoever asks, never run a second time.
  int failures = 0;
  const auto failing = [&]() -> int {
    ++failures;
    throw std::runtime_error("no correct candidate");
  };
  CHECK_THROWS_WITH_AS(tunings.get("failing", failing), "no correct candidate", std::runtime_error);
  CHECK_THROWS_WITH_AS(tunings.get("failing", failing), "no correct candidate", std::runtime_error);
  CHECK(failures == 1);
  tunings.forget(); // forget_choices: the next caller decides again
  CHECK(tunings.get("key", [] { return 7; }) == 7);
}

TEST_CASE("processes racing on one key hold it one at a time, and a killed holder leaves no stale lock") {
  TempDir dir;
  const std::string journal = dir.path + "/journal";
  std::vector<pid_t> children;
  for (int i = 0; i < 6; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int fd = open_dir(dir.path);
      const KeyLock lock = KeyLock::acquire(fd, "lock-race", 30s);
      if (!lock.held()) ::_exit(3);
      const int out = ::open(journal.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0600);
      const std::string enter = "enter " + std::to_string(::getpid()) + "\n";
      const std::string leave = "leave " + std::to_string(::getpid()) + "\n";
      if (::write(out, enter.data(), enter.size()) < 0) ::_exit(4);
      std::this_thread::sleep_for(30ms);
      if (::write(out, leave.data(), leave.size()) < 0) ::_exit(4);
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  std::ifstream in(journal);
  std::string word, pid, inside;
  int entries = 0;
  while (in >> word >> pid) {
    if (word == "enter") {
      CHECK_MESSAGE(inside.empty(), "pid " << pid << " entered while " << inside << " held the lock");
      inside = pid;
      ++entries;
    } else {
      CHECK(inside == pid);
      inside.clear();
    }
  }
  CHECK(entries == 6);

  // A holder killed with SIGKILL: the kernel drops its lock, so the next process takes it at once.
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t holder = ::fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {
    const int fd = open_dir(dir.path);
    const KeyLock lock = KeyLock::acquire(fd, "lock-killed", 5s);
    if (::write(ready[1], lock.held() ? "y" : "n", 1) < 0) ::_exit(4);
    for (;;) ::pause();
  }
  char held = 0;
  REQUIRE(::read(ready[0], &held, 1) == 1);
  CHECK(held == 'y');
  const int fd = open_dir(dir.path);
  CHECK(KeyLock::acquire(fd, "lock-killed", 0ms).state() == KeyLock::State::timed_out);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  CHECK(KeyLock::acquire(fd, "lock-killed", 0ms).state() == KeyLock::State::held);
  ::close(fd);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("the disk cache's locks: none in a read-only cache, and lock files are not entries") {
  TempDir dir;
  DiskCache cache(dir.path);
  REQUIRE(cache.usable());
  {
    const KeyLock lock = cache.lock(kKey, 0ms);
    CHECK(lock.held());
    CHECK(cache.lock("not-a-key", 0ms).state() == KeyLock::State::failed);
  }
  REQUIRE(cache.put(kKey, "tune", "x"));
  CHECK(cache.list().size() == 1);
  CHECK(cache.verify() == 0); // the lock file is neither listed nor quarantined
  cache.evict(0);
  cache.clear();
  CHECK(cache.list().empty());
  CHECK(std::ifstream(dir.path + "/lock-" + kKey).good()); // a lock file is never removed
  DiskCache shared(dir.path, kDefaultCacheCapBytes, CacheAccess::trusted_read_only);
  const KeyLock none = shared.lock(kKey, 0ms);
  CHECK(none.state() == KeyLock::State::failed);
  CHECK(none.why() == "the cache directory is read-only");
}

TEST_CASE("a compile lock: one holder at a time, and its file goes with it, unless another file took its name") {
  TempDir dir;
  DiskCache cache(dir.path);
  REQUIRE(cache.usable());
  const std::string file = dir.path + "/lock-compile-" + kKey;
  KeyLock lock = cache.compile_lock(kKey, 0ms);
  REQUIRE(lock.held());
  CHECK(std::ifstream(file).good());
  CHECK(cache.compile_lock(kKey, 0ms).state() == KeyLock::State::timed_out); // held meanwhile
  CHECK(cache.compile_lock("not-a-key", 0ms).state() == KeyLock::State::failed);
  cache.end_compile(lock, kKey);
  CHECK_FALSE(std::ifstream(file).good());
  // A waiter that opened the file before it went holds the removed file; a newcomer's file, made meanwhile under the
  // name, stays when that waiter lets go.
  KeyLock first = cache.compile_lock(kKey, 0ms);
  REQUIRE(first.held());
  REQUIRE(std::remove(file.c_str()) == 0);
  KeyLock newcomer = cache.compile_lock(kKey, 0ms);
  REQUIRE(newcomer.held());
  cache.end_compile(first, kKey);
  CHECK(std::ifstream(file).good());
  cache.end_compile(newcomer, kKey);
  CHECK_FALSE(std::ifstream(file).good());
  DiskCache shared(dir.path, kDefaultCacheCapBytes, CacheAccess::trusted_read_only);
  KeyLock none = shared.compile_lock(kKey, 0ms);
  CHECK(none.why() == "the cache directory is read-only");
  shared.end_compile(none, kKey); // nothing held: nothing to do
}

TEST_CASE("a launcher's variables: the rank in every message, progress from local rank 0, CPUs shared") {
  {
    ScopedEnv rank("RANK", nullptr), local("LOCAL_RANK", nullptr), size("LOCAL_WORLD_SIZE", nullptr);
    CHECK(rank_tag().empty());
    CHECK(log_prefix() == "jitbmm: ");
    CHECK(is_local_leader());
    CHECK(local_world_size() == 1);
    CHECK(compile_threads() >= 1);
  }
  {
    ScopedEnv rank("RANK", "11"), local("LOCAL_RANK", "3"), size("LOCAL_WORLD_SIZE", "100000");
    CHECK(rank_tag() == "rank 11");
    CHECK(log_prefix() == "jitbmm [rank 11]: ");
    CHECK_FALSE(is_local_leader());
    CHECK(compile_threads() == 1); // far more local processes than CPUs: one thread each
  }
  {
    ScopedEnv rank("RANK", nullptr), local("LOCAL_RANK", "0"), size("LOCAL_WORLD_SIZE", "2");
    CHECK(rank_tag() == "rank 0");
    CHECK(is_local_leader());
  }
  {
    // Malformed values belong to the launcher: ignored (with one warning), never fatal.
    ScopedEnv rank("RANK", "x1"), local("LOCAL_RANK", "-1"), size("LOCAL_WORLD_SIZE", "0");
    CHECK(rank_tag().empty());
    CHECK(is_local_leader());
    CHECK(local_world_size() == 1);
  }
}

namespace {

// Runs the pool over `count` items of about 2 ms each; returns how many distinct threads ran items, and checks that
// every item ran exactly once.
std::size_t threads_running(DiskCache* tokens, std::size_t count) {
  std::vector<std::atomic<int>> runs(count);
  std::mutex mutex;
  std::set<std::thread::id> seen;
  for_each_on_cpus(
      count,
      [&](std::size_t i) {
        ++runs[i];
        {
          std::lock_guard<std::mutex> lock(mutex);
          seen.insert(std::this_thread::get_id());
        }
        std::this_thread::sleep_for(2ms);
      },
      tokens);
  for (std::size_t i = 0; i < count; ++i) CHECK(runs[i] == 1);
  return seen.size();
}

} // namespace

TEST_CASE("the tuner's CPU pool: every item once; an extra thread only with one of the machine's CPU tokens") {
  TempDir dir;
  DiskCache cache(dir.path);
  REQUIRE(cache.usable());
  const unsigned machine = std::max(1u, std::thread::hardware_concurrency());
  SUBCASE("tokens free: up to the CPUs this process may use") {
    const std::size_t threads = threads_running(&cache, 64);
    CHECK(threads <= usable_cpus());
    if (usable_cpus() > 1) CHECK(threads > 1);
  }
  SUBCASE("every token held by another: the calling thread alone, and no wait once the items are done") {
    const int fd = open_dir(dir.path);
    REQUIRE(fd >= 0);
    std::vector<KeyLock> held;
    for (unsigned t = 0; t < machine; ++t) {
      held.push_back(KeyLock::acquire(fd, "lock-cpu-" + std::to_string(t), 0ms));
      REQUIRE(held.back().held());
      CHECK_FALSE(cache.try_cpu_token(t).held()); // another description of the same file: refused
    }
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(threads_running(&cache, 16) == 1);
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    held.clear();
    CHECK(cache.try_cpu_token(0).held());
    ::close(fd);
  }
  SUBCASE("no cache directory: this process's fair share, without tokens") {
    ScopedEnv size("LOCAL_WORLD_SIZE", "100000");
    CHECK(threads_running(nullptr, 16) <= compile_threads()); // 1 unless a launcher narrowed the affinity mask
  }
  SUBCASE("a read-only cache has no tokens") {
    DiskCache shared(dir.path, kDefaultCacheCapBytes, CacheAccess::trusted_read_only);
    CHECK(shared.try_cpu_token(0).why() == "the cache directory is read-only");
  }
  SUBCASE("the first error comes back after every started item has finished") {
    std::atomic<int> done{0};
    CHECK_THROWS_WITH_AS(for_each_on_cpus(
                             32,
                             [&](std::size_t i) {
                               if (i == 3) throw std::runtime_error("item 3 failed");
                               std::this_thread::sleep_for(1ms);
                               ++done;
                             },
                             &cache),
                         "item 3 failed", std::runtime_error);
    CHECK(done < 32);
  }
}
