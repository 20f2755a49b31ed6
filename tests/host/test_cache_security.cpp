// The disk cache, the dump and the override directories against another user of the machine (no GPU): only a
// directory its owner alone can feed is used, only regular files of the user's below a bound are read, and nothing
// is ever written through a link.
#include <doctest/doctest.h>

#include <array>
#include <vector>

#include "tests/temp_dir.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>

#include "cache/disk_cache.hpp"
#include "cache/safe_file.hpp"
#include "runtime/kernel_files.hpp"
#include "tests/needs.hpp"
#include "process_state.hpp"

using namespace jitbmm;
using jitbmm::test::CapturedStderr;
using jitbmm::test::ScopedEnv;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;

// Writes the entries (key, kind, payload) into `path`, then makes it a shared cache's directory: 0755.
void fill_shared(const std::string& path, const std::vector<std::array<std::string, 3>>& entries) {
  {
    DiskCache writer(path);
    for (const auto& [key, kind, payload] : entries) REQUIRE(writer.put(key, kind, payload));
  }
  fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
}

std::string key_of(int n) {
  return cubin_key(
      {"extern \"C\" __global__ void k() {}" + std::to_string(n), {"-std=c++17"}, "13.0", "sm_90", 13000, "0.1.0"});
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

int count_files(const std::string& dir) {
  return static_cast<int>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

uint64_t total_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& item : fs::directory_iterator(dir))
    if (item.is_regular_file()) n += item.file_size();
  return n;
}

// Runs `checks` in a child process that file permissions bind: this user, or uid 65534 when this is root (root
// ignores permission bits, so a 0500 directory tests nothing as root). Returns what the child reported: "" when
// every check held, else what failed.
std::string as_user_bound_by_permissions(const std::function<std::string()>& checks) {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(report[0]);
    std::string failed;
    if (::geteuid() == 0 && (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0))
      failed = "cannot become uid 65534";
    else
      failed = checks();
    if (failed.empty()) failed = "ok";
    const ssize_t wrote = ::write(report[1], failed.data(), failed.size());
    ::_exit(wrote == static_cast<ssize_t>(failed.size()) ? 0 : 1);
  }
  ::close(report[1]);
  std::string got;
  char buffer[512];
  for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;) got.append(buffer, static_cast<std::size_t>(n));
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the child failed: " + got;
  return got == "ok" ? "" : got;
}

// A directory the child of as_user_bound_by_permissions may work in: as root, handed to uid 65534.
void hand_to_bound_user(const std::string& path) {
  if (::geteuid() == 0) REQUIRE(::chown(path.c_str(), kNobody, kNobody) == 0);
}

// get() run with a time limit, so a read that blocks (a FIFO) fails the test instead of hanging it.
std::optional<std::string> get_within_seconds(DiskCache& cache, const std::string& key, const std::string& kind) {
  auto result = std::async(std::launch::async, [&] { return cache.get(key, kind); });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    FAIL("get() blocked for 10 s (reading a FIFO?)");
    std::_Exit(1); // the blocked thread cannot be joined
  }
  return result.get();
}

} // namespace

TEST_CASE("a cache directory writable by group or others is refused: memory only, one warning, nothing read") {
  for (const fs::perms mode : {fs::perms::all, fs::perms::owner_all | fs::perms::group_all}) {
    TempDir dir;
    const std::string key = key_of(1);
    write_bytes(dir.path + "/" + key + ".cubin", encode_cache_entry(key, "planted cubin")); // a valid entry
    fs::permissions(dir.path, mode);
    CapturedStderr err;
    DiskCache cache(dir.path);
    CHECK_FALSE(cache.usable());
    CHECK(cache.refused().find("not trusted") != std::string::npos);
    CHECK_FALSE(cache.get(key, "cubin")); // the planted entry is never loaded
    CHECK_FALSE(cache.put(key_of(2), "cubin", "x"));
    CHECK_FALSE(cache.put_source(key_of(2), "x"));
    CHECK(cache.list().empty());
    CHECK(cache.verify() == 0);
    cache.evict(0);
    cache.clear();
    CHECK(count_files(dir.path) == 1); // nothing written, moved or removed
    const std::string text = err.text();
    CHECK(err.warnings() == 1);
    CHECK(text.find(dir.path) != std::string::npos);
    CHECK(text.find("writable by group or others") != std::string::npos);
  }
}

TEST_CASE("the user's own directory, readable by others (0755), is accepted") {
  TempDir dir;
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  DiskCache cache(dir.path);
  CHECK(cache.usable());
  CHECK(cache.put(key_of(3), "cubin", "payload"));
  CHECK(cache.get(key_of(3), "cubin") == std::string("payload"));
}

TEST_CASE("a cache directory owned by another user is refused" * doctest::test_suite(test::kNeedsRoot)) {
  TempDir dir;
  const std::string key = key_of(4);
  write_bytes(dir.path + "/" + key + ".cubin", encode_cache_entry(key, "planted cubin"));
  REQUIRE(::chown(dir.path.c_str(), kNobody, kNobody) == 0);
  CapturedStderr err;
  DiskCache cache(dir.path);
  CHECK_FALSE(cache.usable());
  CHECK_FALSE(cache.get(key, "cubin"));
  CHECK(err.text().find("owned by uid 65534") != std::string::npos);
}

TEST_CASE("root makes no cache directory inside another user's directory (sudo with the user's HOME)" *
          doctest::test_suite(test::kNeedsRoot)) {
  TempDir home;
  REQUIRE(::chown(home.path.c_str(), kNobody, kNobody) == 0);
  CapturedStderr err;
  DiskCache cache(home.path + "/.cache/jitbmm");
  CHECK_FALSE(cache.usable());
  CHECK_FALSE(fs::exists(home.path + "/.cache"));
  CHECK(err.text().find("which uid 65534 owns") != std::string::npos);
  // In a directory of its own, root makes its cache as before.
  TempDir own;
  DiskCache mine(own.path + "/a/b");
  CHECK(mine.usable());
}

TEST_CASE("a symlinked cache directory is used only when the directory it names passes") {
  TempDir dir;
  fs::create_directory(dir.path + "/mine");
  fs::permissions(dir.path + "/mine", fs::perms::owner_all);
  fs::create_directory(dir.path + "/open");
  fs::permissions(dir.path + "/open", fs::perms::all);
  fs::create_directory_symlink(dir.path + "/mine", dir.path + "/to-mine");
  fs::create_directory_symlink(dir.path + "/open", dir.path + "/to-open");
  CHECK(DiskCache(dir.path + "/to-mine").usable());
  CapturedStderr err;
  CHECK_FALSE(DiskCache(dir.path + "/to-open").usable());
}

TEST_CASE("entries that are not regular files are misses, moved aside, and never block or exhaust memory") {
  TempDir dir;
  DiskCache cache(dir.path);
  REQUIRE(cache.usable());
  CapturedStderr err;
  SUBCASE("a FIFO (used to hang the reader)") {
    const std::string key = key_of(5), path = dir.path + "/" + key + ".cubin";
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    CHECK_FALSE(get_within_seconds(cache, key, "cubin"));
    CHECK_FALSE(fs::exists(fs::symlink_status(path)));
    CHECK(fs::is_fifo(path + ".bad"));
    CHECK(cache.put(key, "cubin", "rebuilt")); // recovered: rebuilt and rewritten
    CHECK(cache.get(key, "cubin") == std::string("rebuilt"));
  }
  SUBCASE("a symbolic link to /dev/zero") {
    const std::string key = key_of(6), path = dir.path + "/" + key + ".tune";
    fs::create_symlink("/dev/zero", path);
    CHECK_FALSE(get_within_seconds(cache, key, "tune"));
    CHECK(fs::is_symlink(path + ".bad")); // the link itself moved, not what it names
    CHECK(fs::exists("/dev/zero"));
    CHECK(err.text().find("symbolic link") != std::string::npos);
  }
  SUBCASE("a symbolic link to a valid entry elsewhere") {
    TempDir other;
    const std::string key = key_of(7);
    write_bytes(other.path + "/" + key + ".cubin", encode_cache_entry(key, "planted elsewhere"));
    fs::create_symlink(other.path + "/" + key + ".cubin", dir.path + "/" + key + ".cubin");
    CHECK_FALSE(cache.get(key, "cubin"));
    CHECK(fs::exists(other.path + "/" + key + ".cubin"));
  }
  SUBCASE("a 2 GiB sparse file (used to throw bad_alloc)") {
    const std::string key = key_of(8), path = dir.path + "/" + key + ".cubin";
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, off_t(2) << 30) == 0);
    ::close(fd);
    std::optional<std::string> got;
    CHECK_NOTHROW(got = cache.get(key, "cubin"));
    CHECK_FALSE(got);
    CHECK(err.text().find("larger than") != std::string::npos);
  }
  SUBCASE("a tuning decision far above its bound") {
    const std::string key = key_of(9);
    write_bytes(dir.path + "/" + key + ".tune", encode_cache_entry(key, std::string(2 << 20, 't')));
    CHECK_FALSE(cache.get(key, "tune"));
  }
  SUBCASE("a directory") {
    const std::string key = key_of(10);
    fs::create_directory(dir.path + "/" + key + ".cubin");
    CHECK_FALSE(get_within_seconds(cache, key, "cubin"));
  }
  CHECK(err.warnings() == 1); // one warning, however many entries
}

TEST_CASE("an entry owned by another user in the user's own directory is a miss" *
          doctest::test_suite(test::kNeedsRoot)) {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_of(11), path = dir.path + "/" + key + ".cubin";
  REQUIRE(cache.put(key, "cubin", "payload"));
  REQUIRE(::chown(path.c_str(), kNobody, kNobody) == 0);
  CapturedStderr err;
  CHECK_FALSE(cache.get(key, "cubin"));
  CHECK(err.text().find("owned by uid 65534") != std::string::npos);
}

TEST_CASE("an entry a group or others may write is moved aside with one warning and rebuilt, a decision too") {
  TempDir dir;
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec); // others may enter and open files
  DiskCache cache(dir.path);
  REQUIRE(cache.usable());
  const std::string cubin = key_of(16), decision = key_of(17), good = key_of(18);
  REQUIRE(cache.put(cubin, "cubin", "cubin another user rewrote"));
  REQUIRE(cache.put(decision, "tune", "decision another user rewrote"));
  REQUIRE(cache.put(good, "tune", "kept"));
  REQUIRE(::chmod((dir.path + "/" + cubin + ".cubin").c_str(), 0666) == 0);
  REQUIRE(::chmod((dir.path + "/" + decision + ".tune").c_str(), 0620) == 0); // group-writable is no better
  CapturedStderr err;
  CHECK_FALSE(cache.get(cubin, "cubin"));
  CHECK_FALSE(cache.get(decision, "tune"));
  CHECK(cache.get(good, "tune") == std::string("kept"));
  const std::string text = err.text();
  CHECK(err.warnings() == 1);
  CHECK(text.find("writable by group or others, mode 0666") != std::string::npos);
  CHECK(fs::exists(dir.path + "/" + cubin + ".cubin.bad"));
  CHECK(fs::exists(dir.path + "/" + decision + ".tune.bad"));
  CHECK(cache.put(cubin, "cubin", "rebuilt")); // recovered: rebuilt and written 0600
  CHECK(cache.get(cubin, "cubin") == std::string("rebuilt"));
}

TEST_CASE("a trusted shared cache serves no entry a group or others may write; it stays in place") {
  TempDir shared;
  const std::string key = key_of(19), good = key_of(25);
  fill_shared(shared.path, {{key, "tune", "rewritten by anyone"}, {good, "cubin", "shared cubin"}});
  REQUIRE(::chmod((shared.path + "/" + key + ".tune").c_str(), 0666) == 0);
  TempDir mine;
  DiskCache cache(mine.path);
  cache.set_fallback(std::make_unique<DiskCache>(shared.path, 0, CacheAccess::trusted_read_only));
  CapturedStderr err;
  CHECK_FALSE(cache.get(key, "tune"));
  CHECK(cache.get(good, "cubin") == std::string("shared cubin"));
  CHECK(err.warnings() == 1);
  CHECK(err.text().find("writable by group or others, mode 0666") != std::string::npos);
  CHECK(fs::exists(shared.path + "/" + key + ".tune")); // the trusted cache is never changed
}

TEST_CASE("a trusted shared cache serves only its root's and the user's entries" *
          doctest::test_suite(test::kNeedsRoot)) {
  TempDir shared; // root's, as a cluster's cache filled by its admins
  const std::string foreign = key_of(26), by_root = key_of(27);
  fill_shared(shared.path, {{foreign, "cubin", "planted by another user"}, {by_root, "tune", "root's decision"}});
  for (const std::string& name : {foreign + ".cubin", by_root + ".tune"})
    REQUIRE(::chmod((shared.path + "/" + name).c_str(), 0644) == 0);
  REQUIRE(::chown((shared.path + "/" + foreign + ".cubin").c_str(), kNobody - 1, kNobody - 1) == 0);
  TempDir mine;
  hand_to_bound_user(mine.path);
  const std::string failed = as_user_bound_by_permissions([&]() -> std::string {
    CapturedStderr err;
    DiskCache cache(mine.path);
    cache.set_fallback(std::make_unique<DiskCache>(shared.path, 0, CacheAccess::trusted_read_only));
    if (cache.get(foreign, "cubin")) return "uid 65533's entry served";
    if (cache.get(by_root, "tune") != std::string("root's decision")) return "root's entry not served";
    if (err.text().find("owned by uid 65533, not by uid 65534 or root") == std::string::npos)
      return "no warning naming the owner: " + err.text();
    return "";
  });
  CHECK(failed == "");
  TempDir roots;
  CapturedStderr err; // root itself: another user's entry is not root's
  DiskCache cache(roots.path);
  cache.set_fallback(std::make_unique<DiskCache>(shared.path, 0, CacheAccess::trusted_read_only));
  CHECK_FALSE(cache.get(foreign, "cubin"));
  CHECK(err.text().find("owned by uid 65533, not by uid 0") != std::string::npos);
}

TEST_CASE("verify counts refused entries as damaged; every damaged entry is recovered") {
  TempDir dir;
  DiskCache cache(dir.path);
  CapturedStderr err;
  const std::string fifo = key_of(12), link = key_of(13), junk = key_of(14), good = key_of(15);
  REQUIRE(::mkfifo((dir.path + "/" + fifo + ".cubin").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", dir.path + "/" + link + ".cubin");
  write_bytes(dir.path + "/" + junk + ".tune", "junk");
  REQUIRE(cache.put(good, "cubin", "good"));
  CHECK(cache.verify() == 3);
  CHECK(cache.list().size() == 1);
  for (const std::string& k : {fifo, link}) {
    CHECK_FALSE(cache.get(k, "cubin"));
    CHECK(cache.put(k, "cubin", "rebuilt " + k));
    CHECK(cache.get(k, "cubin") == "rebuilt " + k);
  }
  CHECK(cache.put(junk, "tune", "decision"));
  CHECK(cache.get(junk, "tune") == std::string("decision"));
}

TEST_CASE("the size cap counts sources, quarantined and temp files; .bad first, stale temp files removed") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string payload(1000, 'e');
  // Each key a minute older than the next: stamped, because file times may be as coarse as the kernel's tick
  // (several milliseconds) and a sleep between the writes made this test flaky on a loaded machine.
  const auto now = fs::file_time_type::clock::now();
  for (int i = 0; i < 4; ++i) {
    REQUIRE(cache.put(key_of(100 + i), "cubin", payload));
    REQUIRE(cache.put_source(key_of(100 + i), std::string(1000, 's')));
    for (const char* suffix : {".cubin", ".cu"})
      fs::last_write_time(dir.path + "/" + key_of(100 + i) + suffix, now - std::chrono::minutes(10 - i));
  }
  write_bytes(dir.path + "/" + key_of(200) + ".cubin.bad", std::string(3000, 'b'));
  // Temp files as a writer names them (this process's: a live writer).
  const std::string writer = "-" + std::to_string(::getpid()) + "-0123456789abcdef";
  const std::string stale = dir.path + "/.tmp-" + key_of(201) + ".cubin" + writer,
                    live = dir.path + "/.tmp-" + key_of(202) + ".cubin" + writer;
  write_bytes(stale, std::string(3000, 't'));
  write_bytes(live, std::string(100, 't'));
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(stale, two_hours_ago);

  const uint64_t before = total_bytes(dir.path);
  CHECK(before > 14000);
  cache.evict(before - 1); // the stale temp file goes without counting as an eviction
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(dir.path + "/" + key_of(200) + ".cubin.bad"));
  cache.evict(total_bytes(dir.path) - 1); // then the .bad file, before any entry
  CHECK_FALSE(fs::exists(dir.path + "/" + key_of(200) + ".cubin.bad"));
  CHECK(cache.list().size() == 4);

  const uint64_t cap = 2 * (cache.list()[0].bytes + 1000) + 100; // two entries with their sources, the live temp
  cache.evict(cap);
  CHECK(total_bytes(dir.path) <= cap);
  CHECK(cache.list().size() == 2);
  CHECK_FALSE(fs::exists(dir.path + "/" + key_of(100) + ".cu")); // a source goes with its entry
  CHECK(cache.get(key_of(103), "cubin"));
  CHECK(fs::exists(live)); // a live writer's file stays
}

TEST_CASE("another program's files in the cache directory stay, its \".tmp-\" files too, however old") {
  TempDir dir;
  const std::string foreign_temp = dir.path + "/.tmp-another-program", foreign = dir.path + "/notes.txt";
  for (const std::string& path : {foreign_temp, foreign}) {
    write_bytes(path, std::string(10, 'f'));
    fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::hours(2));
  }
  DiskCache cache(dir.path); // opening sweeps dead temp files
  REQUIRE(cache.put(key_of(300), "cubin", std::string(100, 'e')));
  cache.evict(0);
  CHECK(cache.list().empty());
  REQUIRE(cache.put(key_of(301), "cubin", std::string(100, 'e')));
  cache.clear();
  CHECK(cache.list().empty());
  CHECK(fs::exists(foreign_temp));
  CHECK(fs::exists(foreign));
}

TEST_CASE("JITBMM_CACHE_MAX_BYTES: a malformed value is an error naming the variable") {
  {
    ScopedEnv env("JITBMM_CACHE_MAX_BYTES", "16777216");
    CHECK(DiskCache::cap_from_env() == kMinCacheCapBytes);
  }
  for (const char* bad : {"12abc", "-1", "1e9", " 5", "18446744073709551616", "lots"}) {
    CAPTURE(bad);
    ScopedEnv env("JITBMM_CACHE_MAX_BYTES", bad);
    CHECK_THROWS_WITH_AS(DiskCache::cap_from_env(), doctest::Contains("JITBMM_CACHE_MAX_BYTES"), std::invalid_argument);
  }
  ScopedEnv env("JITBMM_CACHE_MAX_BYTES", "");
  CHECK(DiskCache::cap_from_env() == kDefaultCacheCapBytes);
}

TEST_CASE("JITBMM_CACHE_MAX_BYTES below one entry's room is an error naming the minimum, never a cache turned off") {
  for (const char* small : {"0", "1000", "4096", "16777215"}) {
    CAPTURE(small);
    ScopedEnv env("JITBMM_CACHE_MAX_BYTES", small);
    CHECK_THROWS_WITH_AS(
        DiskCache::cap_from_env(),
        doctest::Contains(
            ("JITBMM_CACHE_MAX_BYTES: " + std::string(small) + " bytes is below the minimum, 16777216").c_str()),
        std::invalid_argument);
  }
}

TEST_CASE("JITBMM_CACHE: off, 0, false, no and on, 1, true, yes in any case; anything else is an error") {
  for (const char* off : {"off", "OFF", "Off", "0", "false", "FALSE", "no", "No"}) {
    CAPTURE(off);
    ScopedEnv env("JITBMM_CACHE", off);
    CHECK_FALSE(DiskCache::enabled_from_env());
  }
  for (const char* on : {"on", "ON", "1", "true", "True", "yes", "YES", ""}) {
    CAPTURE(on);
    ScopedEnv env("JITBMM_CACHE", on);
    CHECK(DiskCache::enabled_from_env());
  }
  for (const char* bad : {"maybe", "offf", " off", "off ", "2", "disabled", "-1"}) {
    CAPTURE(bad);
    ScopedEnv env("JITBMM_CACHE", bad);
    CHECK_THROWS_WITH_AS(
        DiskCache::enabled_from_env(),
        doctest::Contains(
            ("JITBMM_CACHE: expected on or off (or 1/0, true/false, yes/no), got '" + std::string(bad) + "'").c_str()),
        std::invalid_argument);
  }
}

TEST_CASE("the trusted shared cache is read after a miss, with the same checks, and never written") {
  TempDir mine, shared;
  const std::string key = key_of(20), damaged = key_of(21);
  {
    DiskCache writer(shared.path);
    REQUIRE(writer.put(key, "cubin", "shared cubin"));
    write_bytes(shared.path + "/" + damaged + ".cubin", "damaged");
    fs::create_symlink("/dev/zero", shared.path + "/" + key_of(22) + ".cubin");
  }
  fs::permissions(shared.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                   fs::perms::others_read | fs::perms::others_exec); // read by all, fed by its owner
  const int files_before = count_files(shared.path);
  DiskCache cache(mine.path);
  cache.set_fallback(std::make_unique<DiskCache>(shared.path, 0, CacheAccess::trusted_read_only));
  CHECK(cache.get(key, "cubin") == std::string("shared cubin"));
  CapturedStderr err;
  CHECK_FALSE(cache.get(damaged, "cubin"));
  CHECK_FALSE(get_within_seconds(cache, key_of(22), "cubin"));
  CHECK(cache.put(damaged, "cubin", "mine")); // written to the private cache only
  CHECK(cache.get(damaged, "cubin") == std::string("mine"));
  CHECK(count_files(shared.path) == files_before); // nothing written, quarantined or removed there
  CHECK(file_bytes(shared.path + "/" + damaged + ".cubin") == "damaged");

  DiskCache read_only(shared.path, 0, CacheAccess::trusted_read_only);
  CHECK(read_only.usable());
  CHECK_FALSE(read_only.put(key_of(23), "cubin", "x"));
  read_only.evict(0);
  read_only.clear();
  CHECK(read_only.verify() == 2);
  CHECK(count_files(shared.path) == files_before);
}

TEST_CASE("a trusted shared cache a group or anyone can write to is refused, sticky or not; its owner's is used") {
  TempDir shared;
  fs::permissions(shared.path, fs::perms::all);
  {
    CapturedStderr err;
    DiskCache refused(shared.path, 0, CacheAccess::trusted_read_only);
    CHECK_FALSE(refused.usable());
    CHECK(err.text().find("JITBMM_CACHE_TRUSTED_DIR") != std::string::npos);
  }
  fs::permissions(shared.path, fs::perms::all | fs::perms::sticky_bit); // /tmp-like: anyone can still add entries
  CHECK_FALSE(DiskCache(shared.path, 0, CacheAccess::trusted_read_only).usable());
  fs::permissions(shared.path, fs::perms::owner_all | fs::perms::group_all | fs::perms::others_read |
                                   fs::perms::others_exec); // any member of the group could plant an entry
  {
    CapturedStderr err;
    DiskCache refused(shared.path, 0, CacheAccess::trusted_read_only);
    CHECK_FALSE(refused.usable());
    CHECK(err.text().find("writable by group or others, mode 0775") != std::string::npos);
  }
  fs::permissions(shared.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                   fs::perms::others_read | fs::perms::others_exec);
  CHECK(DiskCache(shared.path, 0, CacheAccess::trusted_read_only).usable());
}

TEST_CASE("a trusted shared cache is used only when owned by the user or root" *
          doctest::test_suite(test::kNeedsRoot)) {
  TempDir base;
  fs::permissions(base.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                 fs::perms::others_read | fs::perms::others_exec);
  const std::string key = key_of(24), by_root = base.path + "/root", by_other = base.path + "/other";
  for (const std::string& dir : {by_root, by_other}) {
    DiskCache writer(dir); // created 0700, then opened to all for reading
    REQUIRE(writer.put(key, "cubin", "shared cubin"));
    fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                             fs::perms::others_exec);
    fs::permissions(dir + "/" + key + ".cubin",
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  }
  REQUIRE(::chown(by_other.c_str(), kNobody - 1, kNobody - 1) == 0); // neither the reader (65534) nor root
  const std::string failed = as_user_bound_by_permissions([&]() -> std::string {
    CapturedStderr err;
    DiskCache root_owned(by_root, 0, CacheAccess::trusted_read_only);
    if (!root_owned.usable()) return "root's directory refused: " + root_owned.refused();
    if (root_owned.get(key, "cubin") != std::string("shared cubin")) return "root's entry not served";
    DiskCache foreign(by_other, 0, CacheAccess::trusted_read_only);
    if (foreign.usable()) return "uid 65533's directory used";
    if (foreign.get(key, "cubin")) return "uid 65533's entry served";
    if (err.text().find("owned by uid 65533, not by uid 65534 or root") == std::string::npos)
      return "no warning naming the owner: " + err.text();
    return "";
  });
  CHECK(failed == "");
  CapturedStderr err; // root itself: the other user's directory is still not its own
  CHECK_FALSE(DiskCache(by_other, 0, CacheAccess::trusted_read_only).usable());
  CHECK(err.text().find("owned by uid 65533, not by uid 0") != std::string::npos);
}

TEST_CASE("JITBMM_DUMP_DIR: created 0700, refused when others can write, never written through a link") {
  TempDir base, victim_dir;
  const GeneratedKernel kernel{"logplus_test_kernel", "extern \"C\" __global__ void logplus_test_kernel() {}"};
  const std::string dump = base.path + "/dump", victim = victim_dir.path + "/victim";
  ScopedEnv env("JITBMM_DUMP_DIR", dump);
  CHECK(dump_kernel(kernel, "// ptx"));
  CHECK((fs::status(dump).permissions() & fs::perms::all) == fs::perms::owner_all);
  CHECK(file_bytes(dump + "/" + kernel.name + ".cu") == kernel.source);

  write_bytes(victim, "precious");
  fs::remove(dump + "/" + kernel.name + ".cu");
  fs::remove(dump + "/" + kernel.name + ".ptx");
  fs::create_symlink(victim, dump + "/" + kernel.name + ".cu");
  fs::create_symlink(victim, dump + "/" + kernel.name + ".ptx");
  CHECK(dump_kernel(kernel, "// ptx"));
  CHECK(file_bytes(victim) == "precious");
  CHECK_FALSE(fs::is_symlink(dump + "/" + kernel.name + ".cu")); // replaced by a regular file
  CHECK(file_bytes(dump + "/" + kernel.name + ".cu") == kernel.source);

  fs::remove(dump + "/" + kernel.name + ".cu");
  fs::permissions(dump, fs::perms::all);
  CapturedStderr err;
  CHECK(dump_kernel(kernel, ""));
  CHECK_FALSE(fs::exists(dump + "/" + kernel.name + ".cu"));
  CHECK(err.text().find("not trusted") != std::string::npos);
}

TEST_CASE("JITBMM_OVERRIDE_DIR: read only from a private directory, and only a regular file") {
  TempDir dir, elsewhere;
  GeneratedKernel kernel{"logplus_override_kernel", "generated"};
  kernel.waits_for_prior_grids = true;
  const std::string file = dir.path + "/" + kernel.name + ".cu";
  ScopedEnv env("JITBMM_OVERRIDE_DIR", dir.path);
  CapturedStderr err;
  CHECK(with_override(kernel).source == "generated"); // no file: unchanged
  CHECK(with_override(kernel).waits_for_prior_grids);
  write_bytes(file, "overridden");
  CHECK(with_override(kernel).source == "overridden");
  CHECK_FALSE(with_override(kernel).waits_for_prior_grids); // the user's text: launched plainly

  fs::remove(file);
  write_bytes(elsewhere.path + "/planted.cu", "planted");
  fs::create_symlink(elsewhere.path + "/planted.cu", file);
  CHECK(with_override(kernel).source == "generated");

  fs::remove(file);
  write_bytes(file, "overridden");
  fs::permissions(dir.path, fs::perms::all);
  CHECK(with_override(kernel).source == "generated");
  CHECK(err.text().find("not trusted") != std::string::npos);
}

TEST_CASE("a private cache directory the user cannot write serves its entries, with one warning, and stores nothing") {
  TempDir base;
  hand_to_bound_user(base.path);
  const std::string dir = base.path + "/cache", key = key_of(30), damaged = key_of(31);
  const std::string failed = as_user_bound_by_permissions([&]() -> std::string {
    {
      DiskCache writer(dir);
      if (!writer.put(key, "cubin", "stored cubin") || !writer.put_source(key, "stored source") ||
          !writer.put(damaged, "tune", "decision"))
        return "the writable directory took no entries";
    }
    write_bytes(dir + "/" + damaged + ".tune", "damaged");
    if (::chmod(dir.c_str(), 0500) != 0) return "chmod failed";
    const int files_before = count_files(dir);
    CapturedStderr err;
    DiskCache cache(dir);
    std::string missed;
    const auto expect = [&](bool held, const char* what) {
      if (!held) missed += std::string(what) + "; ";
    };
    expect(cache.usable() && cache.read_only(), "opened read-only");
    for (int call = 0; call < 3; ++call) { // what every kernel build and tuning would do
      expect(cache.get(key, "cubin") == std::string("stored cubin"), "its entry served");
      expect(!cache.get(key_of(32), "cubin"), "a miss");
      expect(!cache.put(key_of(32), "cubin", "new"), "put refused");
      expect(!cache.put_source(key_of(32), "new"), "put_source refused");
      expect(!cache.lock(key_of(32), std::chrono::milliseconds(0)).held(), "no lock taken");
      expect(!cache.try_cpu_token(0).held(), "no CPU token taken");
      cache.evict(0);
    }
    expect(cache.get_source(key) == std::string("stored source"), "its source served");
    expect(!cache.get(damaged, "tune"), "a damaged entry is a miss");
    cache.clear();
    expect(count_files(dir) == files_before, "nothing written, moved or removed");
    const std::string text = err.text();
    expect(err.warnings() == 2, "two warnings: the read-only directory, the damaged entry");
    expect(text.find("cache directory " + dir + " is read-only") != std::string::npos &&
               text.find("nothing new is stored") != std::string::npos,
           "the warning says the directory is read-only and nothing new is stored");
    if (!missed.empty()) missed += "stderr: " + text;
    return missed;
  });
  CHECK(failed == "");
}

TEST_CASE("when only the source beside a stored cubin cannot be written, the warning says the cubin is stored") {
  TempDir dir;
  DiskCache cache(dir.path);
  const std::string key = key_of(33);
  fs::create_directory(dir.path + "/" + key + ".cu"); // a non-empty directory: renaming over it fails, even as root
  write_bytes(dir.path + "/" + key + ".cu/in-the-way", "x");
  CapturedStderr err;
  CHECK(cache.put(key, "cubin", "payload"));
  CHECK_FALSE(cache.put_source(key, "source"));
  CHECK_FALSE(cache.put_source(key, "source"));
  CHECK(cache.get(key, "cubin") == std::string("payload"));
  const std::string text = err.text();
  CHECK(err.warnings() == 1);
  CHECK(text.find(key + ".cu") != std::string::npos);
  CHECK(text.find("cubin is stored") != std::string::npos);
  CHECK(text.find("memory only") == std::string::npos);
}

namespace {

// A temp file `name` (temp_file_name) left by a writer that exited before renaming it; reaped or still a zombie.
struct DeadWriter {
  std::string temp;
  pid_t pid = 0;
};
DeadWriter dead_writer(const std::string& dir, const std::string& target, bool reap) {
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string temp = temp_file_name(target);
    write_bytes(dir + "/" + temp, "half an entry");
    const ssize_t wrote = ::write(report[1], temp.data(), temp.size());
    ::_exit(wrote == static_cast<ssize_t>(temp.size()) ? 0 : 1); // killed mid-write, as far as the cache can tell
  }
  ::close(report[1]);
  DeadWriter out{"", pid};
  char buffer[512];
  for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;) out.temp.append(buffer, std::size_t(n));
  ::close(report[0]);
  siginfo_t exited{};
  ::waitid(P_PID, static_cast<id_t>(pid), &exited, WEXITED | (reap ? 0 : WNOWAIT)); // a zombie once not reaped
  return out;
}

} // namespace

TEST_CASE("temp files of writers that exited go when the cache is opened or next written; others stay") {
  TempDir dir;
  const std::string target = key_of(34) + ".cubin";
  const std::string mine = temp_file_name(target);
  CHECK(mine.rfind(".tmp-" + target + "-" + std::to_string(::getpid()) + ".", 0) == 0);
  CHECK_FALSE(temp_writer_gone(mine));
  const DeadWriter reaped = dead_writer(dir.path, target, true), zombie = dead_writer(dir.path, target, false);
  CHECK(temp_writer_gone(reaped.temp));
  CHECK(temp_writer_gone(zombie.temp));
  // Names that say nothing certain: another machine's (or pid namespace's) tag, the older <pid>-<random> form.
  std::string foreign = reaped.temp;
  const std::size_t tag_end = foreign.rfind('-'), tag_start = foreign.rfind('.', tag_end);
  foreign.replace(tag_start + 1, tag_end - tag_start - 1, std::string(tag_end - tag_start - 1, '0'));
  const std::string older = ".tmp-" + target + "-" + std::to_string(reaped.pid) + "-0123456789abcdef";
  CHECK_FALSE(temp_writer_gone(foreign));
  CHECK_FALSE(temp_writer_gone(older));
  for (const std::string& name : {mine, foreign, older}) write_bytes(dir.path + "/" + name, "in progress?");

  DiskCache cache(dir.path); // opening sweeps
  CHECK_FALSE(fs::exists(dir.path + "/" + reaped.temp));
  CHECK_FALSE(fs::exists(dir.path + "/" + zombie.temp));
  for (const std::string& name : {mine, foreign, older}) CHECK(fs::exists(dir.path + "/" + name));
  ::waitpid(zombie.pid, nullptr, 0);

  const DeadWriter later = dead_writer(dir.path, target, true); // killed while this process runs
  REQUIRE(cache.put(key_of(34), "cubin", "payload"));
  cache.evict(cache.cap_bytes()); // as after every cubin written
  CHECK_FALSE(fs::exists(dir.path + "/" + later.temp));
  for (const std::string& name : {mine, foreign, older}) CHECK(fs::exists(dir.path + "/" + name));
  // `jitbmm cache clear` removes every entry and a dead writer's temp file, but not one a live writer is writing.
  const DeadWriter cleared = dead_writer(dir.path, target, true);
  cache.clear();
  CHECK_FALSE(fs::exists(dir.path + "/" + target));
  CHECK_FALSE(fs::exists(dir.path + "/" + cleared.temp));
  CHECK(fs::exists(dir.path + "/" + mine));
}
