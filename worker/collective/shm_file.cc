#include "worker/collective/shm_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker/collective/shm_layout.h"

namespace kubetrain::worker {
namespace {

// Free bytes in `directory`'s filesystem, or -1 when unknown.
int64_t FreeBytesIn(const std::string& directory) {
  struct statvfs vfs {};
  if (::statvfs(directory.c_str(), &vfs) != 0) return -1;
  return static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
}

absl::Status NoRoom(const std::string& directory, uint64_t bytes) {
  const int64_t free = FreeBytesIn(directory);
  return absl::ResourceExhaustedError(
      absl::StrCat(directory, " is full: ", bytes, " bytes needed for the all-reduce segment, ",
                   free < 0 ? std::string("unknown") : absl::StrCat(free),
                   " free; enlarge it (a pod's ", directory,
                   ": an emptyDir volume with medium: Memory and a sizeLimit) or use "
                   "--communicator gloo"));
}

bool IsSegmentName(const char* name) {
  const size_t len = std::strlen(name);
  if (len != kShmNamePrefix.size() + kShmNameDigits || !absl::StartsWith(name, kShmNamePrefix)) {
    return false;
  }
  for (size_t i = kShmNamePrefix.size(); i < len; ++i) {
    const char c = name[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<ShmFile> MakeShmFile(const std::string& directory, const std::string& name,
                                    uint64_t bytes, int lock_byte) {
  ShmFile file;
  file.path = directory + name;
  file.fd = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (file.fd < 0) {
    // No O_TMPFILE here (EOPNOTSUPP, EISDIR from an old kernel): named at once, locked at once.
    file.fd = ::open(file.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    file.named = file.fd >= 0;
  }
  if (file.fd < 0) {
    const int err = errno;
    if (err == ENOSPC) return NoRoom(directory, bytes);
    return absl::UnavailableError(
        absl::StrCat("making the all-reduce segment in ", directory, ": ", std::strerror(err)));
  }
  auto fail = [&](const absl::Status& s) {
    if (file.named) ::unlink(file.path.c_str());
    ::close(file.fd);
    return s;
  };
  if (!LockShmByte(file.fd, lock_byte)) {
    return fail(absl::UnavailableError(
        absl::StrCat("locking the all-reduce segment ", file.path, ": ", std::strerror(errno))));
  }
  // Allocated now, not only sized: tmpfs makes a sized file sparse, and a write to a page that
  // finds no room would be SIGBUS. posix_fallocate returns its error rather than set errno.
  const int err = ::posix_fallocate(file.fd, 0, static_cast<off_t>(bytes));
  if (err == ENOSPC) return fail(NoRoom(directory, bytes));
  if (err != 0) {
    return fail(absl::UnavailableError(absl::StrCat("allocating ", bytes,
                                                    " bytes for the all-reduce segment ", file.path,
                                                    ": ", std::strerror(err))));
  }
  return file;
}

absl::Status NameShmFile(ShmFile& file) {
  if (file.named) return absl::OkStatus();
  const std::string self = absl::StrCat("/proc/self/fd/", file.fd);
  if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, file.path.c_str(), AT_SYMLINK_FOLLOW) != 0) {
    return absl::UnavailableError(
        absl::StrCat("naming the all-reduce segment ", file.path, ": ", std::strerror(errno)));
  }
  file.named = true;
  return absl::OkStatus();
}

absl::StatusOr<int> OpenShmFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("opening ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(path, " is not a segment file of this user"));
  }
  return fd;
}

void UnlinkShmFile(const std::string& path) { ::unlink(path.c_str()); }

bool LockShmByte(int fd, int byte) {
  struct flock mine {};
  mine.l_type = F_WRLCK;
  mine.l_whence = SEEK_SET;
  mine.l_start = byte;
  mine.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &mine) == 0;
}

bool ShmBytesFree(int fd, int byte, int bytes) {
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = byte;
  probe.l_len = bytes;
  return ::fcntl(fd, F_OFD_GETLK, &probe) == 0 && probe.l_type == F_UNLCK;
}

int SweepStaleShmFiles(const std::string& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (!IsSegmentName(entry->d_name)) continue;
    const std::string path = absl::StrCat(directory, "/", entry->d_name);
    absl::StatusOr<int> fd = OpenShmFile(path);
    if (!fd.ok()) continue;  // gone meanwhile, or another user's
    struct stat st {};
    // Every lock a rank may hold: bytes 0 to kShmMaxRanks - 1.
    if (ShmBytesFree(*fd, 0, kShmMaxRanks) && ::fstat(*fd, &st) == 0 &&
        ::unlink(path.c_str()) == 0) {
      ++removed;
      log::Info("Removed a shared-memory segment no process uses any more",
                {{"path", path}, {"bytes", static_cast<int64_t>(st.st_size)}});
    }
    ::close(*fd);
  }
  ::closedir(dir);
  return removed;
}

}  // namespace kubetrain::worker
