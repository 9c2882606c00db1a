// localkube-pod-init exec: runs a container's program in its pod's namespaces, with its volumes
// mounted in a mount namespace of the container's own (pod_init.cc says what each mode does).
// With --rootfs (the oci runtime: an image's root file system) that namespace's root is the
// image's, which gets the pod's /proc, /dev (the pod's /dev/shm with it), a read-only /sys and
// the pod's /etc/hosts and /etc/resolv.conf before the volumes; with --user the program runs as
// that uid and gid, with no supplementary groups.
// Single-threaded by necessity: setns(CLONE_NEWNS) refuses a multi-threaded caller.
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "localkube/pod_init/pod_init.h"

namespace kubetrain::pod_init {
namespace {

namespace fs = std::filesystem;

// Paths where a mount point can be made without touching the host: the pod's own tmpfs mounts,
// the directories created below and the container's read-write volumes. Canonical paths.
std::vector<std::string> private_trees = {"/tmp", "/run", "/dev/shm"};
// Host directories this mount namespace rebuilt on a tmpfs of its own (Assemble): their own
// entries are private, what lies below those entries is the host's.
std::vector<std::string> assembled_dirs;

bool Under(const std::string& path, const std::string& root) {
  return path == root || path.rfind(root + "/", 0) == 0;
}

// Set once the container's root is an image's: every directory in it is the container's own.
bool own_root = false;

bool IsPrivate(const std::string& dir) {
  if (own_root) return true;
  for (const std::string& r : private_trees) {
    if (Under(dir, r)) return true;
  }
  for (const std::string& a : assembled_dirs) {
    if (dir == a) return true;
  }
  return false;
}

// Rebuilds the host directory `dir` in this mount namespace so that entries can be added to it:
// a tmpfs (with dir's mode and owner) takes its place, holding each of dir's entries as a
// recursive bind mount of the host's (read-write as the host's, submounts included) or the same
// symlink, so everything that was there stays, and new entries go to the tmpfs only. For "/" the
// tmpfs is assembled on /tmp (whose copy is taken first) and becomes the root through
// pivot_root. An overlayfs would not do: it hides the lower directory's submounts (over "/":
// /proc, /sys, /dev, the pod's /tmp...) and sends every write below it to the upper layer.
void Assemble(const std::string& dir) {
  struct Entry {
    std::string name, link;
    int tree = -1;
    bool directory = false;
  };
  std::vector<Entry> entries;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    Entry entry;
    entry.name = e.path().filename().string();
    std::string path = e.path().string();
    if (e.is_symlink(ec)) {
      entry.link = fs::read_symlink(e.path(), ec).string();
      if (ec) Die("readlink " + path, ec.value());
    } else {
      entry.directory = e.is_directory(ec);
      entry.tree =
          open_tree(AT_FDCWD, path.c_str(),
                    OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
      if (entry.tree < 0 && errno == ENOENT) continue;  // gone since it was listed
      if (entry.tree < 0) Die("open_tree " + path);
    }
    entries.push_back(std::move(entry));
  }
  if (ec) Die("list " + dir, ec.value());
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) Die("stat " + dir);
  char options[128];
  std::snprintf(options, sizeof(options), "mode=%o,uid=%u,gid=%u,size=64m", st.st_mode & 07777,
                st.st_uid, st.st_gid);
  const std::string base = dir == "/" ? "/tmp" : dir;
  Mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, options);
  for (Entry& e : entries) {
    std::string path = (fs::path(base) / e.name).string();
    if (e.tree < 0) {
      if (symlink(e.link.c_str(), path.c_str()) != 0) Die("symlink " + path);
      continue;
    }
    if (e.directory ? mkdir(path.c_str(), 0755) != 0
                    : mknod(path.c_str(), S_IFREG | 0600, 0) != 0) {
      Die("create " + path);
    }
    if (move_mount(e.tree, "", AT_FDCWD, path.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      Die("mount " + (fs::path(dir) / e.name).string() + " on " + path);
    }
    close(e.tree);
  }
  if (dir == "/") {
    // The assembled tmpfs becomes the root; the old root, stacked on it, is detached.
    if (chdir(base.c_str()) != 0) Die("chdir " + base);
    if (syscall(SYS_pivot_root, ".", ".") != 0) Die("pivot_root into a root of the pod's own");
    if (umount2(".", MNT_DETACH) != 0) Die("detach the old root");
    if (chdir("/") != 0) Die("chdir /");
  }
  assembled_dirs.push_back(dir);
}

// Makes `target` exist (a directory, or an empty file when `directory` is false) inside this
// container's mount namespace. Missing directories are made in the nearest existing ancestor when
// that is private to the pod, else after rebuilding that ancestor on a tmpfs of the container's
// own (Assemble): nothing is ever created on the host, and all of it goes with the namespace.
void EnsureMountPoint(const std::string& target, bool directory) {
  std::error_code ec;
  if (fs::exists(target, ec)) return;
  fs::path existing = target;
  while (existing != existing.root_path() && !fs::exists(existing, ec)) {
    if (fs::is_symlink(fs::symlink_status(existing, ec))) {
      Usage("mountPath " + target + ": " + existing.string() + " is a symlink to nothing");
    }
    existing = existing.parent_path();
  }
  fs::path real = fs::canonical(existing, ec);
  if (ec) Die("resolve " + existing.string(), ec.value());
  if (!fs::is_directory(real, ec)) {
    Usage("mountPath " + target + ": " + existing.string() +
          " is not a directory, so no mount point can be made below it");
  }
  fs::path rest = fs::path(target).lexically_relative(existing);
  if (!IsPrivate(real.string())) Assemble(real.string());
  fs::path made = real / *rest.begin();  // the topmost directory created
  fs::path full = real / rest;
  fs::create_directories(directory ? full : full.parent_path(), ec);
  if (ec) Die("mkdir " + full.string(), ec.value());
  if (!directory) {
    int fd = open(full.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) Die("create " + full.string());
    close(fd);
  }
  if (directory || made != full) private_trees.push_back(made.string());
}

struct BindMount {
  std::string source, target;
  bool read_only = false;
  int tree = -1;  // a detached copy of the source, made in the host's mount namespace
  bool directory = true;
};

// What the kubelet ends a container with, sent to its process group (common/process.h): the
// child is in that group and gets them itself.
constexpr int kGroupSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// Who the program runs as (--user); unset: as this process.
struct Credentials {
  bool set = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Runs `argv` in a child (in the PID namespace joined last) and ends as it ends: its exit code,
// or killed by the same signal, so the kubelet sees what it would see of the program itself.

int RunInPod(std::vector<std::string>& argv, const Credentials& user) {
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  struct sigaction ignore = {}, saved[std::size(kGroupSignals)];
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (size_t k = 0; k < std::size(kGroupSignals); ++k) {
    sigaction(kGroupSignals[k], &ignore, &saved[k]);
  }
  int alive[2];
  if (pipe2(alive, O_CLOEXEC) != 0) Die("pipe");
  const pid_t child = fork();
  if (child < 0) Die("fork into the pod's PID namespace");
  if (child == 0) {
    close(alive[1]);
    // Before DieWithParent: a change of credentials clears the parent-death signal.
    if (user.set &&
        (setgroups(0, nullptr) != 0 || setgid(user.gid) != 0 || setuid(user.uid) != 0)) {
      Die("run as user " + std::to_string(user.uid) + " group " + std::to_string(user.gid));
    }
    DieWithParent(alive[0]);
    for (size_t k = 0; k < std::size(kGroupSignals); ++k) {
      sigaction(kGroupSignals[k], &saved[k], nullptr);
    }
    execvp(cargv[0], cargv.data());
    int err = errno;
    std::fprintf(stderr, "exec: \"%s\": %s\n", argv[0].c_str(),
                 err == ENOENT ? "executable file not found in $PATH" : std::strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  close(alive[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) Die("wait for the container's process");
  }
  // Ends at once with _exit: exit handlers that fork (LeakSanitizer's, in a sanitizer build)
  // would put their child in the pod's PID namespace, where it cannot see this process, and wait
  // for it for ever.
  std::fflush(nullptr);
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  const rlimit no_core = {0, 0};  // the program's core dump, if any, is written; not this one's
  setrlimit(RLIMIT_CORE, &no_core);
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  kill(getpid(), sig);
  _exit(128 + sig);
}

// A detached copy of `path` (and what is mounted below it, with `recursive`) in this mount
// namespace, to be mounted elsewhere with move_mount.
int CopyOfTree(const std::string& path, bool recursive) {
  int tree = open_tree(AT_FDCWD, path.c_str(),
                       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0));
  if (tree < 0) Die("open_tree " + path);
  return tree;
}

// Mounts the detached `tree` on `target`, making the mount point first (EnsureMountPoint).
void Attach(int tree, const std::string& source, const std::string& target, bool directory,
            bool read_only) {
  EnsureMountPoint(target, directory);
  if (move_mount(tree, "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    Die("mount " + source + " on " + target);
  }
  close(tree);
  if (read_only) Mount(nullptr, target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY);
}

// Makes `rootfs` (a detached copy of the image's root file system, taken on the host) this mount
// namespace's root, as a runtime's pivot_root into a container's root does, and mounts the pod's
// own /proc, /dev (with the pod's /dev/shm), a read-only /sys and the pod's /etc/hosts and
// /etc/resolv.conf in it: the pod's, since this namespace is a copy of the pod's.
void EnterImageRoot(int rootfs) {
  struct Pod {
    const char* path;
    bool directory, recursive, read_only;
    int tree = -1;
  } pod[] = {{"/proc", true, true, false},
             {"/dev", true, true, false},
             {"/sys", true, false, true},
             {"/etc/hosts", false, false, true},
             {"/etc/resolv.conf", false, false, true}};
  for (Pod& p : pod) p.tree = CopyOfTree(p.path, p.recursive);
  // The pod's /tmp (a mount point of this namespace's own) holds the root until pivot_root.
  if (move_mount(rootfs, "", AT_FDCWD, "/tmp", MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    Die("mount the image's root file system");
  }
  close(rootfs);
  if (chdir("/tmp") != 0) Die("chdir into the image's root file system");
  if (syscall(SYS_pivot_root, ".", ".") != 0) Die("pivot_root into the image's root file system");
  if (umount2(".", MNT_DETACH) != 0) Die("detach the pod's root");
  if (chdir("/") != 0) Die("chdir /");
  own_root = true;
  for (const Pod& p : pod) Attach(p.tree, p.path, p.path, p.directory, p.read_only);
}

}  // namespace

int Exec(const std::vector<std::string>& args) {
  std::string pod, workdir, rootfs;
  Credentials user;
  std::vector<BindMount> mounts;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& flag = args[i];
    if ((flag == "--ro" || flag == "--rw") && i + 2 < args.size()) {
      std::string target = fs::path(args[i + 2]).lexically_normal().string();
      if (target.size() > 1 && target.back() == '/') target.pop_back();
      if (target.empty() || target[0] != '/') Usage("exec: " + args[i + 2] + " is not absolute");
      mounts.push_back({args[i + 1], target, flag == "--ro"});
      i += 2;
    } else if (flag == "--pod" && i + 1 < args.size()) {
      pod = args[++i];
    } else if (flag == "--workdir" && i + 1 < args.size()) {
      workdir = args[++i];
    } else if (flag == "--rootfs" && i + 1 < args.size()) {
      rootfs = args[++i];
    } else if (flag == "--user" && i + 1 < args.size()) {
      const std::string& ids = args[++i];
      unsigned long uid = 0, gid = 0;
      char extra = 0;
      if (std::sscanf(ids.c_str(), "%lu:%lu%c", &uid, &gid, &extra) != 2) {
        Usage("exec: --user " + ids + " is not UID:GID");
      }
      user = {true, static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
    } else {
      Usage("exec: unknown or incomplete flag " + flag);
    }
  }
  if (pod.empty() || i + 1 >= args.size()) Usage("exec needs --pod PID -- ARGV...");
  if (!rootfs.empty() && (rootfs[0] != '/' || !fs::is_directory(rootfs))) {
    Usage("exec: --rootfs " + rootfs + " is not an absolute path to a directory");
  }
  std::vector<std::string> argv(args.begin() + static_cast<long>(i) + 1, args.end());
  char cwd_buf[4096];
  std::string cwd = getcwd(cwd_buf, sizeof(cwd_buf)) ? cwd_buf : "/";
  // The sources are the host's paths (the pod's volumes may live under the host's /tmp, which the
  // pod's namespace covers): detached copies of them are taken before moving in.
  for (BindMount& m : mounts) {
    struct stat st;
    if (stat(m.source.c_str(), &st) != 0) Die("stat " + m.source);
    m.directory = S_ISDIR(st.st_mode);
    m.tree = CopyOfTree(m.source, /*recursive=*/true);
  }
  // The image's root may live under the host's /tmp too (a buildah storage there).
  const int root_tree = rootfs.empty() ? -1 : CopyOfTree(rootfs, true);
  // pid_for_children: the holder's PID 1 is in it, the holder itself is not.
  const std::pair<const char*, int> kinds[] = {{"net", CLONE_NEWNET},
                                               {"ipc", CLONE_NEWIPC},
                                               {"uts", CLONE_NEWUTS},
                                               {"pid_for_children", CLONE_NEWPID},
                                               {"mnt", CLONE_NEWNS}};
  std::vector<int> fds;
  for (const auto& [name, type] : kinds) {
    std::string path = "/proc/" + pod + "/ns/" + name;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Die("open " + path);
    fds.push_back(fd);
  }
  for (size_t k = 0; k < fds.size(); ++k) {
    if (setns(fds[k], kinds[k].second) != 0) Die(std::string("setns ") + kinds[k].first);
    close(fds[k]);
  }
  // Each container's mounts are its own, as each container has its own mount namespace.
  if (unshare(CLONE_NEWNS) != 0) Die("unshare");
  MakePrivate();
  if (root_tree >= 0) EnterImageRoot(root_tree);
  for (const BindMount& m : mounts) {
    Attach(m.tree, m.source, m.target, m.directory, m.read_only);
    if (!m.read_only && m.directory) {
      // The pod's own volume: a later mount point below it is made in it, as runtimes do.
      std::error_code ec;
      fs::path real = fs::canonical(m.target, ec);
      if (!ec) private_trees.push_back(real.string());
    }
  }
  std::error_code ec;
  if (!workdir.empty()) {
    if (chdir(workdir.c_str()) != 0) Die("chdir " + workdir);
  } else if ((root_tree >= 0 || chdir(cwd.c_str()) != 0) && chdir("/") != 0) {
    Die("chdir /");
  }
  return RunInPod(argv, user);
}

}  // namespace kubetrain::pod_init
