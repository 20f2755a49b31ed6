// The disk cache, the dump and the override directories against another user of the machine (no GPU): only a
// directory its owner alone can feed is used, only regular files of the user's below a bound are read, and nothing
// is ever written through a link.
#include <doctest/doctest.h>

#include "tests/temp_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "cache/disk_cache.hpp"
#include "cache/safe_file.hpp"
#include "runtime/kernel_files.hpp"
#include "tests/needs.hpp"

using namespace jitbmm;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;

// Everything written to stderr (where warnings go) while it lives.
class CapturedStderr {
public:
  CapturedStderr() : file_(std::tmpfile()), saved_(::dup(2)) {
    std::fflush(stderr);
    ::dup2(::fileno(file_), 2);
  }
  ~CapturedStderr() {
    restore();
    std::fclose(file_);
  }
  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    for (int c; (c = std::fgetc(file_)) != EOF;) out.push_back(static_cast<char>(c));
    return out;
  }
  int warnings() {
    const std::string t = text();
    int n = 0;
    for (std::size_t at = t.find("warning:"); at != std::string::npos; at = t.find("warning:", at + 1)) ++n;
    return n;
  }

private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_;
};

// Sets an environment variable for a scope, then puts back what was there.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (saved_)
      ::setenv(name_, saved_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char* name_;
  std::optional<std::string> saved_;
};

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
  write_bytes(dir.path + "/.tmp-" + key_of(201) + ".cubin-dead", std::string(3000, 't'));
  write_bytes(dir.path + "/.tmp-" + key_of(202) + ".cubin-live", std::string(100, 't'));
  const std::string stale = dir.path + "/.tmp-" + key_of(201) + ".cubin-dead";
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
  CHECK(fs::exists(dir.path + "/.tmp-" + key_of(202) + ".cubin-live")); // a live writer's file stays
}

TEST_CASE("JITBMM_CACHE_MAX_BYTES: a malformed value is an error naming the variable") {
  {
    ScopedEnv env("JITBMM_CACHE_MAX_BYTES", "4096");
    CHECK(DiskCache::cap_from_env() == 4096);
  }
  for (const char* bad : {"12abc", "-1", "1e9", " 5", "18446744073709551616", "lots"}) {
    CAPTURE(bad);
    ScopedEnv env("JITBMM_CACHE_MAX_BYTES", bad);
    CHECK_THROWS_WITH_AS(DiskCache::cap_from_env(), doctest::Contains("JITBMM_CACHE_MAX_BYTES"), std::invalid_argument);
  }
  ScopedEnv env("JITBMM_CACHE_MAX_BYTES", "");
  CHECK(DiskCache::cap_from_env() == kDefaultCacheCapBytes);
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
  fs::permissions(shared.path, fs::perms::owner_all | fs::perms::group_all | fs::perms::others_read |
                                   fs::perms::others_exec); // group-writable: the cluster's admins
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

TEST_CASE("a trusted shared cache anyone can write to is refused, sticky or not; a group's is used") {
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
                                   fs::perms::others_exec);
  CHECK(DiskCache(shared.path, 0, CacheAccess::trusted_read_only).usable());
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
  const GeneratedKernel kernel{"logplus_override_kernel", "generated"};
  const std::string file = dir.path + "/" + kernel.name + ".cu";
  ScopedEnv env("JITBMM_OVERRIDE_DIR", dir.path);
  CapturedStderr err;
  CHECK(with_override(kernel).source == "generated"); // no file: unchanged
  write_bytes(file, "overridden");
  CHECK(with_override(kernel).source == "overridden");

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
