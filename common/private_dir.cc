#include "common/private_dir.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kubetrain {
namespace {

absl::Status Refuse(const std::string& path, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      path, " ", why,
      "; kubetrain keeps checkpoints and scratch files only in a directory of "
      "its own user that no one else may write: remove it, or set TMPDIR (or the job's "
      "--checkpoint-dir) to a private directory"));
}

// Checks the directory `fd` refers to (opened with O_NOFOLLOW at `path`).
absl::Status CheckOpened(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", strerror(errno)));
  }
  if (st.st_uid != geteuid()) {
    return Refuse(path, absl::StrCat("belongs to ", UserName(st.st_uid), ", not to ",
                                     UserName(geteuid()), " who runs this"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Refuse(path,
                  absl::StrFormat("may be written by other users (mode %04o)", st.st_mode & 07777));
  }
  if ((st.st_mode & 077) != 0 && fchmod(fd, 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot make ", path, " private (chmod 0700): ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status EnsureOne(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    int err = errno;
    return absl::Status(
        err == ENOSPC ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kPermissionDenied,
        absl::StrCat("cannot create ", path, ": ", strerror(err)));
  }
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::error_code ec;
    if (std::filesystem::is_symlink(path, ec)) {
      std::string target = std::filesystem::read_symlink(path, ec).string();
      return Refuse(path, absl::StrCat("is a symbolic link (to ", target,
                                       "), which kubetrain does not follow"));
    }
    if (err == ENOTDIR) return Refuse(path, "is not a directory");
    return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", strerror(err)));
  }
  absl::Status status = CheckOpened(fd, path);
  close(fd);
  return status;
}

}  // namespace

std::string UserName(uid_t uid) {
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  }
  return absl::StrCat("uid ", uid);
}

absl::Status EnsurePrivateDirectory(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("an empty directory name");
  // The missing parents first, each private; parents that exist (/, /tmp) are left as they are.
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  std::vector<std::filesystem::path> missing;
  for (std::filesystem::path q = p; !q.empty() && q != q.root_path(); q = q.parent_path()) {
    struct stat st;
    if (lstat(q.c_str(), &st) == 0) break;
    missing.push_back(q);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (*it == p) break;
    if (mkdir(it->c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", it->string(), ": ", strerror(errno)));
    }
  }
  return EnsureOne(p.string());
}

absl::StatusOr<std::string> UserScratchDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  std::string dir = absl::StrCat(base, "/kubetrain-", geteuid());
  absl::Status status = EnsurePrivateDirectory(dir);
  if (!status.ok()) return status;
  return dir;
}

absl::StatusOr<std::string> MakeUniqueDirectory(const std::string& parent,
                                                const std::string& prefix) {
  std::string tmpl = absl::StrCat(parent, "/", prefix, "-XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create a folder in ", parent, ": ", strerror(errno)));
  }
  return tmpl;
}

}  // namespace kubetrain
