#include "localkube/sandbox/lock_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kubetrain::sandbox {

absl::StatusOr<std::unique_ptr<LockFile>> LockFile::TryAcquire(const std::string& path) {
  for (int attempt = 0; attempt < 16; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create lock file ", path, ": ", std::strerror(errno)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      ::close(fd);
      if (error == EWOULDBLOCK) return nullptr;
      return absl::FailedPreconditionError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(error)));
    }
    struct stat locked, named;
    if (::fstat(fd, &locked) == 0 && ::stat(path.c_str(), &named) == 0 &&
        locked.st_dev == named.st_dev && locked.st_ino == named.st_ino) {
      return std::unique_ptr<LockFile>(new LockFile(path, fd));
    }
    ::close(fd);  // unlinked by its last holder meanwhile: lock the new file
  }
  return absl::UnavailableError(absl::StrCat("lock file ", path, " keeps being replaced"));
}

LockFile::~LockFile() {
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace kubetrain::sandbox
