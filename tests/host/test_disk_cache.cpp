// The disk cache on its own (no GPU): keys, atomic and concurrent writes, damaged entries and ones the system cannot
// read now, unusable directories, eviction.
#include <doctest/doctest.h>

#include "tests/temp_dir.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "tests/needs.hpp"

using namespace jitbmm;
namespace fs = std::filesystem;

namespace {

CubinKeyParts sample_parts() {
  return {"extern \"C\" __global__ void k() {}",
          {"--gpu-architecture=sm_90", "-std=c++17"},
          "13.0",
          "sm_90",
          13000,
          "0.1.0"};
}

std::string key_of(int n) {
  CubinKeyParts p = sample_parts();
  p.source += std::to_string(n);
  return cubin_key(p);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

} // namespace

TEST_CASE("the cubin key changes with every input and only then") {
  const CubinKeyParts base = sample_parts();
  const std::string k = cubin_key(base);
  CHECK(k.size() == 64);
  CHECK(cubin_key(sample_parts()) == k);
  auto differs = [&](auto mutate) {
    CubinKeyParts p = base;
    mutate(p);
    return cubin_key(p) != k;
  };
  CHECK(differs([](CubinKeyParts& p) { p.source += " "; }));
  CHECK(differs([](CubinKeyParts& p) { p.options.push_back("-lineinfo"); }));
  CHECK(differs([](CubinKeyParts& p) { p.options[1] = "-std=c++20"; }));
  CHECK(differs([](CubinKeyParts& p) { p.nvrtc_version = "13.1"; }));
  CHECK(differs([](CubinKeyParts& p) { p.arch = "sm_80"; }));
  CHECK(differs([](CubinKeyParts& p) { p.driver_version = 13010; }));
  CHECK(differs([](CubinKeyParts& p) { p.jitbmm_version = "0.2.0"; }));
  // Field boundaries count: moving text between fields changes the key.
  CHECK(differs([](CubinKeyParts& p) { p.options = {"--gpu-architecture=sm_90-std=c++17"}; }));
}

TEST_CASE("put then get returns the payload; a miss is empty") {
  TempDir dir;
  DiskCache cache(dir.path + "/nested/cache");
  REQUIRE(cache.usable());
  CHECK((fs::status(cache.dir()).permissions() & fs::perms::all) == fs::perms::owner_all); // 0700
  const std::string key = key_of(1), payload("cubin\0bytes", 11);
  CHECK_FALSE(cache.get(key, "cubin"));
  CHECK(cache.put(key, "cubin", payload));
  CHECK(cache.get(key, "cubin") == payload);
  CHECK_FALSE(cache.get(key, "cu"));
  CHECK_FALSE(cache.get("not-a-key", "cubin"));
  const auto entries = cache.list();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].key == key);
  CHECK(entries[0].kind == "cubin");
}

TEST_CASE("an entry truncated at any offset, or with any byte flipped, is a miss and is rebuilt") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_of(2);
  std::string payload(300, '\0');
  std::mt19937 rng(5);
  for (char& c : payload) c = static_cast<char>(rng());
  REQUIRE(cache.put(key, "cubin", payload));
  const std::string path = dir.path + "/" + key + ".cubin";
  const std::string good = file_bytes(path);
  for (std::size_t cut = 0; cut < good.size(); ++cut) {
    CAPTURE(cut);
    write_bytes(path, good.substr(0, cut));
    CHECK_FALSE(cache.get(key, "cubin"));
    CHECK_FALSE(fs::exists(path)); // moved aside
  }
  for (std::size_t at = 0; at < good.size(); at += 7) {
    CAPTURE(at);
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255));
    write_bytes(path, bad);
    CHECK_FALSE(cache.get(key, "cubin"));
  }
  write_bytes(path, good + "x"); // trailing bytes
  CHECK_FALSE(cache.get(key, "cubin"));
  CHECK(cache.put(key, "cubin", payload)); // rebuilt
  CHECK(cache.get(key, "cubin") == payload);
}

TEST_CASE("an entry the system cannot read now (no descriptor left) is a miss, and stays for the next read") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_of(9), path = dir.path + "/" + key + ".cubin";
  REQUIRE(cache.put(key, "cubin", "payload"));
  rlimit limit{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &limit) == 0);
  const rlimit lowered{64, limit.rlim_max};
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  std::vector<int> held;
  for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) held.push_back(fd);
  const int why = errno;
  const bool read = cache.get(key, "cubin").has_value();
  const int damaged = cache.verify();
  for (const int fd : held) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &limit);
  CHECK(why == EMFILE);
  CHECK_FALSE(read);
  CHECK(damaged == 0);
  CHECK(fs::exists(path)); // not moved aside
  CHECK(cache.get(key, "cubin") == std::string("payload"));
}

// No memory for an entry's bytes (a large cubin, a process near its address-space limit) is the system's state too.
// In a child process: an address-space limit breaks sanitizers' shadow memory, so not under them.
TEST_CASE("an entry too large for the memory left is a miss, not an error, and stays for the next read") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  MESSAGE("skipped: an address-space limit and a sanitizer's shadow memory do not mix");
#else
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_of(11), path = dir.path + "/" + key + ".cubin";
  REQUIRE(cache.put(key, "cubin", std::string(std::size_t(64) << 20, 'c')));
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t room = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(16) << 20);
    const rlimit limit{room, room};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
    try {
      ::_exit(cache.get(key, "cubin").has_value() ? 2 : 0);
    } catch (...) {
      ::_exit(1);
    }
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0); // 1: it threw; 2: it read 64 MiB in 16
  CHECK(fs::exists(path));          // not moved aside
  CHECK(cache.get(key, "cubin")->size() == std::size_t(64) << 20);
#endif
}

TEST_CASE("peek reads an entry for display and changes nothing: no last use refreshed, no damaged entry moved aside") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_of(10), path = dir.path + "/" + key + ".tune";
  REQUIRE(cache.put(key, "tune", "decision"));
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(24 * 365);
  fs::last_write_time(path, old);
  CHECK(cache.peek(key, "tune") == std::string("decision"));
  CHECK(fs::last_write_time(path) == old);
  write_bytes(path, "garbage");
  CHECK_FALSE(cache.peek(key, "tune"));
  CHECK(fs::exists(path));
  CHECK_FALSE(cache.get(key, "tune")); // get moves it aside
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("a foreign entry under another key's name is a miss") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string a = key_of(3), b = key_of(4);
  REQUIRE(cache.put(a, "cubin", "payload of a"));
  fs::copy_file(dir.path + "/" + a + ".cubin", dir.path + "/" + b + ".cubin");
  CHECK_FALSE(cache.get(b, "cubin"));
  CHECK(cache.get(a, "cubin") == std::string("payload of a"));
  CHECK(cache.verify() == 0);
  write_bytes(dir.path + "/" + a + ".cubin", "garbage");
  CHECK(cache.verify() == 1);
  CHECK(cache.list().empty());
}

TEST_CASE("16 processes writing one key at once: all succeed, one valid entry, no temp files") {
  TempDir dir;
  const std::string key = key_of(5);
  const std::string payload(1 << 16, 'p');
  std::vector<pid_t> children;
  for (int i = 0; i < 16; ++i) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      DiskCache cache(dir.path);
      _exit(cache.put(key, "cubin", payload) ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  DiskCache cache(dir.path);
  CHECK(cache.get(key, "cubin") == payload);
  int files = 0;
  for (const auto& item : fs::directory_iterator(dir.path)) {
    ++files;
    CHECK(item.path().filename().string().rfind(".tmp-", 0) == std::string::npos);
  }
  CHECK(files == 1);
}

TEST_CASE("an unusable cache directory means memory-only operation, not an error") {
  TempDir dir;
  write_bytes(dir.path + "/file", "not a directory");
  DiskCache blocked(dir.path + "/file/cache"); // its parent is a file: cannot be created, even as root
  CHECK_FALSE(blocked.usable());
  CHECK_FALSE(blocked.put(key_of(6), "cubin", "x"));
  CHECK_FALSE(blocked.get(key_of(6), "cubin"));
}

TEST_CASE("a read-only cache directory takes no entries, and that is not an error" *
          doctest::test_suite(test::kNeedsNonRoot)) { // permissions bind everyone but root
  TempDir dir;
  fs::create_directory(dir.path + "/ro");
  fs::permissions(dir.path + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
  DiskCache read_only(dir.path + "/ro");
  CHECK_FALSE(read_only.put(key_of(6), "cubin", "x"));
}

TEST_CASE("eviction removes the least recently used entries down to the cap") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string payload(1000, 'e');
  for (int i = 0; i < 10; ++i) {
    REQUIRE(cache.put(key_of(100 + i), "cubin", payload));
    ::usleep(2000); // distinct modification times
  }
  REQUIRE(cache.get(key_of(100), "cubin")); // the oldest becomes the most recently used
  const uint64_t entry_bytes = cache.list()[0].bytes;
  cache.evict(4 * entry_bytes);
  const auto left = cache.list();
  CHECK(left.size() == 4);
  CHECK(cache.get(key_of(100), "cubin"));       // kept: used last
  CHECK_FALSE(cache.get(key_of(101), "cubin")); // evicted: least recently used
  cache.clear();
  CHECK(cache.list().empty());
}

TEST_CASE("another program's files in the cache directory are not the cache's: listed, verified, evicted and cleared "
          "never") {
  TempDir dir;
  DiskCache cache(dir.path);
  REQUIRE(cache.put(key_of(1), "cubin", std::string(1000, 'e')));
  const std::string key = key_of(2);
  const std::vector<std::string> theirs = {key + ".tar.gz", key + ".JSON", key + ".txt.bak", key + ".",
                                           key + "_notes",  key + ".bad",  key + ".x.y.bad"};
  for (const std::string& name : theirs) write_bytes(dir.path + "/" + name, std::string(5000, 'x'));
  CHECK(cache.list().size() == 1);
  CHECK(cache.verify() == 0);
  cache.evict(0);
  for (const std::string& name : theirs) CHECK_MESSAGE(fs::exists(dir.path + "/" + name), name);
  REQUIRE(cache.put(key_of(1), "cubin", std::string(1000, 'e')));
  write_bytes(dir.path + "/" + key_of(3) + ".cubin.bad", "quarantined");
  write_bytes(dir.path + "/" + key_of(3) + ".cu", "source");
  // What the cap holds: the entry, the source and the damaged entry, not another program's files.
  CHECK(cache.stored_bytes() ==
        cache.list()[0].bytes + std::string("quarantined").size() + std::string("source").size());
  cache.clear();
  CHECK(cache.list().empty());
  CHECK_FALSE(fs::exists(dir.path + "/" + key_of(3) + ".cubin.bad")); // the cache's own files go
  CHECK_FALSE(fs::exists(dir.path + "/" + key_of(3) + ".cu"));
  for (const std::string& name : theirs) CHECK_MESSAGE(fs::exists(dir.path + "/" + name), name);
}

TEST_CASE("the default location follows JITBMM_CACHE_DIR, then XDG_CACHE_HOME, then HOME") {
  const char* saved[3] = {std::getenv("JITBMM_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string keep[3] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[2] ? saved[2] : ""};
  ::setenv("JITBMM_CACHE_DIR", "/tmp/a", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/x", 1);
  ::setenv("HOME", "/tmp/h", 1);
  CHECK(DiskCache::default_dir() == "/tmp/a");
  ::unsetenv("JITBMM_CACHE_DIR");
  CHECK(DiskCache::default_dir() == "/tmp/x/jitbmm");
  ::unsetenv("XDG_CACHE_HOME");
  CHECK(DiskCache::default_dir() == "/tmp/h/.cache/jitbmm");
  const char* names[3] = {"JITBMM_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i)
    if (saved[i])
      ::setenv(names[i], keep[i].c_str(), 1);
    else
      ::unsetenv(names[i]);
}
