// Files that only their owner can feed: the checks shared by the disk cache and the kernel dump/override
// directories. A directory is used through the descriptor of the directory actually opened and checked, so renaming
// or re-pointing its path later changes nothing; entries are opened relative to it, never through a symbolic link,
// never blocking (a FIFO), never larger than a bound; writes go to a fresh temp file that is renamed over the name,
// so a link planted at the name is replaced, never written through.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace jitbmm {

constexpr uint64_t kMaxSourceBytes = uint64_t(16) << 20; // a kernel's .cu read back (cache source, override file)

// An open file descriptor, closed on destruction.
class FileDescriptor {
public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

private:
  int fd_ = -1;
};

// Who may have fed a directory or a file in it: never a group or others (no write permission for them; on a
// directory, sticky bit or not: it only stops others deleting entries, not adding them), and only its owner: the
// effective user (`owner_only`: jitbmm's own cache, dump and override directories) or also root (`owner_or_root`: a
// shared read-only cache the user named, e.g. a cluster's, filled by its admins). A file is checked as well as its
// directory: in a directory others may enter (0755), a file others may write is theirs to rewrite.
enum class OwnerTrust { owner_only, owner_or_root };

struct CheckedDir {
  FileDescriptor fd;   // valid when trusted
  std::string refused; // else why not: "owned by uid 65534, not by uid 1000", "writable by group or others, mode 0777"
};

// Opens `path` as a directory (a symbolic link is followed to its target, which must pass) and checks the directory
// that was opened.
CheckedDir open_checked_dir(const std::string& path, OwnerTrust trust);

// Creates `path` and any missing parents with mode 0700. Returns an empty string, or what failed; run as root, it
// makes none inside a directory another user owns (that user could neither use nor remove it).
std::string make_private_dirs(const std::string& path);

struct ReadResult {
  // unreadable: the system could not read it (open files, memory, I/O), which says nothing of the file itself.
  enum Status { ok, absent, refused, unreadable } status = absent;
  std::string bytes; // when ok
  std::string why;   // when refused: "a symbolic link", "a FIFO", "larger than 268435456 bytes", ...; unreadable: errno
  // The file judged (ok or refused), so that what is done about it is done to it and not to a file renamed over it.
  dev_t device = 0;
  ino_t inode = 0;
};

// Reads `name` in the directory `dir_fd` when it is a regular file of at most `max_bytes` that `trust` accepts
// (owner and mode). Opened O_NOFOLLOW|O_NONBLOCK; the checks that decide are made on that descriptor (fstat), so a
// file swapped in after they passed is never the one read.
ReadResult read_regular_file(int dir_fd, const std::string& name, uint64_t max_bytes, OwnerTrust trust);

// Writes `bytes` as `name` in `dir_fd`: a new temp file (temp_file_name, created O_EXCL|O_NOFOLLOW, mode 0600),
// flushed, then renamed over `name`. Returns an empty string, or what failed (the temp file is removed).
std::string write_file_atomically(int dir_fd, const std::string& name, std::string_view bytes);

// A new temp file's name for `name`: .tmp-<name>-<writer>-<random>, where <writer> is this process's pid, its start
// time and a tag of the machine's boot and pid namespace (<pid>.<start>.<tag>), so that another process can tell
// when the writer is gone; just <pid> where /proc cannot say.
std::string temp_file_name(const std::string& name);
// Whether the writer named in a temp file's name (temp_file_name) has exited: only a name written in this boot and
// pid namespace is judged, by whether a live process has its pid and start time. Any other name (an older format,
// another machine sharing the directory) is never called gone: its age is the only clue.
bool temp_writer_gone(const std::string& temp_name);

} // namespace jitbmm
