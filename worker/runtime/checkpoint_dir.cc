// CheckpointDir: the checkpoint directory opened safely, locked, and written through its
// descriptor; see worker/runtime/checkpoint_dir.h for what is refused and why.
#include "worker/runtime/checkpoint_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/private_dir.h"
#include "common/status.h"

namespace kubetrain::worker {
namespace {

namespace fs = std::filesystem;

// Where a probe writes at start; named like the temporary files, so one left by a crash in the
// probe is removed with them.
constexpr char kProbeFile[] = "checkpoint.probe.tmp";
// Symlinks followed on the way to the directory before giving up (the kernel's limit).
constexpr int kMaxSymlinks = 40;

// A file descriptor, closed when it goes.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { Reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::string ModeBits(mode_t mode) { return absl::StrFormat("%04o", mode & 07777); }

// "/" followed by `parts`.
std::string Shown(const std::vector<std::string>& parts) {
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

// A directory on the way to the checkpoint directory: only this user or root may own it. One
// that its group or others may write without the sticky bit (a Kubernetes emptyDir is 0777, an
// fsGroup volume 2775) is taken with a warning: they could move the checkpoint directory away
// (losing its checkpoints for the next run), but not put a checkpoint of theirs in it, since the
// directory itself must be this user's and is used through the descriptor opened here.
absl::Status CheckAbove(const std::string& dir, const std::string& shown, const struct stat& st,
                        uid_t uid) {
  if (st.st_uid != uid && st.st_uid != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint directory ", dir, ": the folder ", shown, " above it is owned by ",
        UserName(st.st_uid), ", neither this user (", UserName(uid),
        ") nor root, who could put a directory of theirs or a symlink in its place; set "
        "--checkpoint-dir to a folder whose parents only you and root can change"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    log::Warn("A folder above the checkpoint directory is writable by its group or others",
              {{"dir", dir},
               {"folder", shown},
               {"mode", ModeBits(st.st_mode)},
               {"risk", "they could move the checkpoints away; chmod go-w (or +t) the folder"}});
  }
  return absl::OkStatus();
}

// The checkpoint directory itself: this user's, and nobody else's to write.
absl::Status CheckOwn(const std::string& dir, const struct stat& st, uid_t uid) {
  if (st.st_uid != uid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint directory ", dir, " is owned by ", UserName(st.st_uid), ", not by this user (",
        UserName(uid),
        "): its owner could have put a checkpoint there for this run to restore. Set "
        "--checkpoint-dir to a folder of your own (the chief creates it), or, if this one is "
        "yours, `chown ",
        uid, " ", dir, "`"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint directory ", dir, " (owned by ", UserName(st.st_uid), ", mode ",
        ModeBits(st.st_mode),
        ") is writable by its group or others, who could put a checkpoint there for this run to "
        "restore; run `chmod go-w ",
        dir,
        "`, or set --checkpoint-dir to a new folder inside it (the chief creates it private)"));
  }
  return absl::OkStatus();
}

// Opens (making where missing) the directory `dir`, component by component from the root,
// without following a symlink where it is not safe to (worker/runtime/checkpoint_dir.h).
absl::StatusOr<UniqueFd> OpenDirectory(const std::string& dir, uid_t uid) {
  if (dir.empty()) return absl::InvalidArgumentError("no checkpoint directory given");
  std::error_code ec;
  const fs::path absolute = fs::absolute(dir, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("checkpoint directory ", dir, ": ", ec.message()));
  // The components still to walk, the next one last.
  std::vector<std::string> pending;
  // "." changes nothing, and left last it would hide which component is the directory.
  auto push = [&pending](absl::string_view path) {
    std::vector<std::string> parts;
    for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
      if (part != ".") parts.emplace_back(part);
    }
    pending.insert(pending.end(), parts.rbegin(), parts.rend());
  };
  push(absolute.string());
  std::vector<std::string> walked;  // the physical path so far, for messages
  UniqueFd cur(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (cur.get() < 0)
    return absl::UnavailableError(absl::StrCat("cannot open /: ", strerror(errno)));
  struct stat st;
  if (fstat(cur.get(), &st) != 0) return absl::UnavailableError("cannot stat /");
  RETURN_IF_ERROR(pending.empty() ? CheckOwn(dir, st, uid) : CheckAbove(dir, "/", st, uid));
  int symlinks = 0;
  while (!pending.empty()) {
    const std::string name = std::move(pending.back());
    pending.pop_back();
    const bool last = pending.empty();
    const std::string shown = Shown(walked) + (walked.empty() ? "" : "/") + name;
    if (name != ".." && fstatat(cur.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = readlinkat(cur.get(), name.c_str(), target, sizeof(target) - 1);
      if (n < 0) return absl::UnavailableError(absl::StrCat("cannot read the symlink ", shown));
      target[n] = '\0';
      if (last) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint directory ", dir, " is a symlink (to ", target,
            "): whoever can change the link would choose where checkpoints go and what is "
            "restored; set --checkpoint-dir to the real directory"));
      }
      if (st.st_uid != uid && st.st_uid != 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint directory ", dir, ": the symlink ", shown, " on the way is owned by ",
            UserName(st.st_uid), ", neither this user (", UserName(uid),
            ") nor root, who could point it elsewhere; set --checkpoint-dir to a path without it"));
      }
      if (++symlinks > kMaxSymlinks) {
        return absl::FailedPreconditionError(
            absl::StrCat("checkpoint directory ", dir, ": too many levels of symlinks"));
      }
      if (target[0] == '/') {
        cur = UniqueFd(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (cur.get() < 0) return absl::UnavailableError("cannot open /");
        walked.clear();
      }
      push(target);
      continue;
    }
    constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    UniqueFd next(openat(cur.get(), name.c_str(), kFlags));
    bool created = false;
    if (next.get() < 0 && errno == ENOENT) {
      if (mkdirat(cur.get(), name.c_str(), 0700) == 0) {
        created = true;
      } else if (errno != EEXIST) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot create checkpoint directory ", shown, ": ", strerror(errno)));
      }
      next = UniqueFd(openat(cur.get(), name.c_str(), kFlags));
    }
    if (next.get() < 0) {
      const int err = errno;
      if (err == ELOOP) {  // it became a symlink since it was looked at
        return absl::FailedPreconditionError(
            absl::StrCat("checkpoint directory ", dir, ": ", shown, " changed into a symlink"));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint directory ", dir, ": cannot open ", shown, ": ", strerror(err)));
    }
    if (fstat(next.get(), &st) != 0) {
      return absl::UnavailableError(absl::StrCat("cannot stat ", shown, ": ", strerror(errno)));
    }
    // 0700 whatever the umask: mkdir's mode is only an upper bound.
    if (created && fchmod(next.get(), 0700) == 0) st.st_mode = (st.st_mode & ~07777) | 0700;
    if (name == "..") {
      if (!walked.empty()) walked.pop_back();
    } else {
      walked.push_back(name);
    }
    RETURN_IF_ERROR(last ? CheckOwn(dir, st, uid) : CheckAbove(dir, Shown(walked), st, uid));
    cur = std::move(next);
  }
  return cur;
}

// "pid 12 on host h (job j, since t)", from a lock file's contents.
std::string DescribeHolder(const std::string& contents) {
  nlohmann::json j = nlohmann::json::parse(contents, nullptr, false);
  if (!j.is_object() || !j.contains("pid")) return "a run that has not written its details yet";
  std::string out = absl::StrCat("pid ", j["pid"].dump());
  if (j.contains("host") && j["host"].is_string()) {
    absl::StrAppend(&out, " on host ", j["host"].get<std::string>());
  }
  std::vector<std::string> more;
  if (j.contains("job") && j["job"].is_string() && !j["job"].get<std::string>().empty()) {
    more.push_back(absl::StrCat("job ", j["job"].get<std::string>()));
  }
  if (j.contains("since") && j["since"].is_string()) {
    more.push_back(absl::StrCat("since ", j["since"].get<std::string>()));
  }
  if (!more.empty()) absl::StrAppend(&out, " (", absl::StrJoin(more, ", "), ")");
  return out;
}

// Takes the directory's lock and writes this run's details into it.
absl::StatusOr<UniqueFd> LockDirectory(int dir_fd, const std::string& dir, const std::string& job) {
  const std::string path = absl::StrCat(dir, "/", CheckpointDir::kLockFile);
  UniqueFd fd(
      openat(dir_fd, CheckpointDir::kLockFile, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open the lock file ", path, ": ", strerror(errno)));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file; remove it"));
  }
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot lock ", path, ": ", strerror(err),
          " (the file system does not support flock); set --checkpoint-dir to a local folder"));
    }
    char buf[4096];
    const ssize_t n = pread(fd.get(), buf, sizeof(buf), 0);
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint directory ", dir,
        " is in use by another run: ", DescribeHolder(std::string(buf, n > 0 ? n : 0)),
        ". Two runs in one checkpoint directory delete each other's checkpoints; stop that run, "
        "or give this one another --checkpoint-dir"));
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string details =
      nlohmann::json{
          {"pid", getpid()},
          {"host", host},
          {"job", job},
          {"since", absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone())}}
          .dump() +
      "\n";
  (void)fchmod(fd.get(), 0600);
  if (ftruncate(fd.get(), 0) != 0 ||
      pwrite(fd.get(), details.data(), details.size(), 0) != static_cast<ssize_t>(details.size())) {
    // The lock holds without them; a refused run's message just names no details.
    log::Warn("Cannot write the run's details into the checkpoint lock file",
              {{"file", path}, {"error", strerror(errno)}});
  }
  return fd;
}

// Removes what earlier runs left half written: their checkpoints' and manifests' temporary
// files. Only the holder of the lock may, or it could take a live run's file.
void RemoveStaleTemporaries(int dir_fd, const std::string& dir) {
  DIR* d = fdopendir(openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d == nullptr) return;
  std::vector<std::string> removed;
  while (const struct dirent* e = readdir(d)) {
    const absl::string_view name = e->d_name;
    if (absl::EndsWith(name, ".tmp") &&
        (absl::StartsWith(name, "ckpt-") || absl::StartsWith(name, "checkpoint."))) {
      if (unlinkat(dir_fd, e->d_name, 0) == 0) removed.emplace_back(name);
    }
  }
  closedir(d);
  if (!removed.empty()) {
    log::Info("Removed partial checkpoint files an earlier run left",
              {{"dir", dir}, {"files", absl::StrJoin(removed, ",")}});
  }
}

// Why writing `file` failed, errno `err`, with the fix where there is one.
std::string WriteFailure(const std::string& file, int err, size_t bytes) {
  std::string out = absl::StrCat("cannot write ", file, ": ", strerror(err));
  if (err == EFBIG) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      absl::StrAppend(&out, " (the file-size limit, ulimit -f, is ", limit.rlim_cur,
                      " bytes; this file is ", bytes, "): raise the limit");
    }
  } else if (err == ENOSPC || err == EDQUOT) {
    absl::StrAppend(&out, " (", bytes, " bytes): free space on its file system");
  }
  return out;
}

// Writes all of `data` to `fd`, then fsyncs it; the errno of the failure, or 0.
int WriteAndSync(int fd, absl::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += n;
  }
  return fsync(fd) == 0 ? 0 : errno;
}

// Writes a file as a checkpoint would, and removes it: a directory that is read-only, full or
// over a limit is an error at start.
absl::Status Probe(int dir_fd, const std::string& dir) {
  const std::string file = absl::StrCat(dir, "/", kProbeFile);
  UniqueFd fd(
      openat(dir_fd, kProbeFile, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  int err = fd.get() < 0 ? errno : WriteAndSync(fd.get(), std::string(4096, '\0'));
  if (fd.get() >= 0 && close(fd.release()) != 0 && err == 0) err = errno;
  unlinkat(dir_fd, kProbeFile, 0);
  if (err == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint directory ", dir, " cannot be written: ", WriteFailure(file, err, 4096),
      ". Make it writable, or set --checkpoint-dir to another folder"));
}

// The directories this process holds, by device and inode (worker/runtime/checkpoint_dir.h: the
// lock is the process's).
struct Registry {
  std::mutex mu;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<CheckpointDir>> open;
  std::map<const CheckpointDir*, std::pair<dev_t, ino_t>> keys;
};

Registry& Held() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

absl::StatusOr<std::shared_ptr<CheckpointDir>> CheckpointDir::Open(const std::string& path,
                                                                   const std::string& job) {
  static std::once_flag ignore_sigxfsz;
  std::call_once(ignore_sigxfsz, [] { signal(SIGXFSZ, SIG_IGN); });
  ASSIGN_OR_RETURN(UniqueFd dir, OpenDirectory(path, geteuid()));
  struct stat st;
  if (fstat(dir.get(), &st) != 0) return absl::UnavailableError(absl::StrCat("cannot stat ", path));
  const std::pair<dev_t, ino_t> key{st.st_dev, st.st_ino};
  Registry& registry = Held();
  std::unique_lock<std::mutex> lock(registry.mu);
  while (registry.open.contains(key)) {
    if (std::shared_ptr<CheckpointDir> held = registry.open[key].lock()) return held;
    // Its last holder is closing it: the entry goes once its lock is released.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
  ASSIGN_OR_RETURN(UniqueFd lock_fd, LockDirectory(dir.get(), path, job));
  RemoveStaleTemporaries(dir.get(), path);
  RETURN_IF_ERROR(Probe(dir.get(), path));
  std::shared_ptr<CheckpointDir> opened(new CheckpointDir(path, dir.release(), lock_fd.release()));
  registry.open[key] = opened;
  registry.keys[opened.get()] = key;
  return opened;
}

CheckpointDir::CheckpointDir(std::string path, int dir_fd, int lock_fd)
    : path_(std::move(path)), dir_fd_(dir_fd), lock_fd_(lock_fd) {}

CheckpointDir::~CheckpointDir() {
  Registry& registry = Held();
  std::lock_guard<std::mutex> lock(registry.mu);
  close(lock_fd_);  // releases the lock
  close(dir_fd_);
  if (auto it = registry.keys.find(this); it != registry.keys.end()) {
    registry.open.erase(it->second);
    registry.keys.erase(it);
  }
}

std::string CheckpointDir::PathOf(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

absl::Status CheckpointDir::WriteAtomically(absl::string_view name, absl::string_view data) const {
  const std::string tmp = absl::StrCat(name, ".tmp");
  UniqueFd fd(
      openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return absl::UnavailableError(WriteFailure(PathOf(tmp), errno, data.size()));
  }
  // Private whatever the umask, or the mode of a file of that name left before.
  int err = fchmod(fd.get(), 0600) == 0 ? 0 : errno;
  if (err == 0) err = WriteAndSync(fd.get(), data);
  // close reports what a network file system could not write back.
  if (close(fd.release()) != 0 && err == 0) err = errno;
  if (err == 0 && renameat(dir_fd_, tmp.c_str(), dir_fd_, std::string(name).c_str()) != 0) {
    const int rename_err = errno;
    unlinkat(dir_fd_, tmp.c_str(), 0);
    return absl::UnavailableError(absl::StrCat("cannot rename ", PathOf(tmp), " to ", PathOf(name),
                                               ": ", strerror(rename_err)));
  }
  if (err != 0) {
    // A partial file would hold the space a next attempt needs, and outlive the run.
    unlinkat(dir_fd_, tmp.c_str(), 0);
    return absl::UnavailableError(WriteFailure(PathOf(tmp), err, data.size()));
  }
  (void)fsync(dir_fd_);  // the rename itself, durable
  return absl::OkStatus();
}

bool CheckpointDir::Exists(absl::string_view name) const {
  struct stat st;
  return fstatat(dir_fd_, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

void CheckpointDir::Remove(absl::string_view name) const {
  unlinkat(dir_fd_, std::string(name).c_str(), 0);
}

}  // namespace kubetrain::worker
