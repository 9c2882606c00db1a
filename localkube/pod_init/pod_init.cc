// localkube-pod-init: puts a pod's processes into the pod's namespaces, as a container runtime's
// pause container and `runc exec` do (localkube/pod_sandbox.h drives it; README "Pod sandboxes").
//
//   localkube-pod-init hold --netns PATH --hostname NAME --hosts FILE --resolv-conf FILE
//                           [--tmp-size S] [--shm-size S]
//     Joins the network namespace at PATH, makes new mount, IPC, UTS and PID namespaces, sets the
//     hostname, bind-mounts the hosts FILE (read-only) on /etc/hosts, mounts fresh tmpfs on /tmp,
//     /dev/shm and /run and puts a copy of the resolv.conf FILE on /etc/resolv.conf. Its child is
//     PID 1 of the pod (PodInit: mounts the pod's own /proc, reaps orphans). Says "ready" on stdout
//     and holds the namespaces until SIGTERM (or its parent dies); killing it kills PID 1 and with
//     it every process of the pod. All of its mounts are private: nothing propagates to the host,
//     and they go when the namespace's last process does.
//   localkube-pod-init exec --pod PID [--rootfs DIR] [--user UID:GID]
//                           [--ro SRC DST | --rw SRC DST]... [--workdir DIR] -- ARGV...
//     Joins PID's (a holder's) namespaces, makes its own copy of the mount namespace, mounts each
//     host path SRC at DST and runs ARGV with the environment it was given in a child, in the
//     pod's PID namespace (setns(CLONE_NEWPID) moves only children there). It stays outside as
//     the container's face to the kubelet: it ignores the termination signals the kubelet sends
//     the process group (the child, in the same group, gets them) and ends as the child ends,
//     with its exit code or by its signal. A mount point that does not exist is made in that
//     copy only, never on the host (EnsureMountPoint). A command that is not found exits 127, as
//     a shell's child does. --rootfs (an oci container's image, exec.cc) makes DIR the root of
//     that copy, with the pod's /proc, /dev, /sys, /etc/hosts and /etc/resolv.conf in it;
//     --user runs the program as UID:GID with no supplementary groups.
//
// Single-threaded by necessity: setns(CLONE_NEWNS) refuses a multi-threaded caller.
#include <errno.h>
#include <fcntl.h>
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

[[noreturn]] void Die(const std::string& what, int err) {
  std::fprintf(stderr, "localkube-pod-init: %s: %s\n", what.c_str(), std::strerror(err));
  std::exit(1);
}

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "localkube-pod-init: %s\n", why.c_str());
  std::exit(2);
}

void Mount(const char* source, const std::string& target, const char* type, unsigned long flags,
           const std::string& data) {
  if (mount(source, target.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) != 0) {
    Die("mount " + std::string(type ? type : "bind") + " on " + target);
  }
}

void MakePrivate() { Mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE); }

void DieWithParent(int alive) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  pollfd p = {alive, POLLIN, 0};
  if (poll(&p, 1, 0) != 0) _exit(137);
  close(alive);
}

namespace {

namespace fs = std::filesystem;

// The pod's resolv.conf: `text`, the kubelet's (pointing at the cluster DNS, localkube's on the
// node's bridge address: cluster_dns.h), on whatever /etc/resolv.conf leads to.
void SetUpResolvConf(const std::string& target, const std::string& text) {
  const std::string dir = "/run/localkube-pod";
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) Die("mkdir " + dir);
  const std::string source = dir + "/resolv.conf";
  int fd = open(source.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    Die("write " + source);
  }
  close(fd);
  // A target under the (now private) /run is made there; elsewhere only an existing file is
  // covered, never one made on the host.
  if (access(target.c_str(), F_OK) != 0) {
    if (target.rfind("/run/", 0) != 0) return;
    std::string parent = target.substr(0, target.rfind('/'));
    for (size_t at = 1; at != std::string::npos && at <= parent.size();) {
      at = parent.find('/', at + 1);
      mkdir(parent.substr(0, at).c_str(), 0755);
    }
    int made = open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (made < 0) Die("create " + target);
    close(made);
  }
  Mount(source.c_str(), target.c_str(), nullptr, MS_BIND);
  Mount(nullptr, target.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY);
}

// PID 1 of the pod, as the pause container is: mounts the pod's own /proc (a proc shows the PID
// namespace of the process that mounts it), says so on `ready`, then reaps what the pod
// orphans. A namespace's PID 1 gets no signal it has no handler for, from inside the pod or (but
// SIGKILL) from outside; it dies with the holder, and the kernel then kills the whole pod.
[[noreturn]] void PodInit(int alive, int ready) {
  DieWithParent(alive);
  Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  if (write(ready, "1", 1) != 1) _exit(1);
  close(ready);
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  sigprocmask(SIG_SETMASK, &child, nullptr);
  for (;;) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    int sig = 0;
    sigwait(&child, &sig);
  }
}

// Forks the pod's PID 1 (the caller has unshared the PID namespace) and waits until its /proc is
// mounted; its pid in the caller's namespace.
pid_t StartPodInit() {
  int alive[2], ready[2];
  if (pipe2(alive, O_CLOEXEC) != 0 || pipe2(ready, O_CLOEXEC) != 0) Die("pipe");
  pid_t pid = fork();
  if (pid < 0) Die("fork the pod's PID 1");
  if (pid == 0) {
    close(alive[1]);
    close(ready[0]);
    PodInit(alive[0], ready[1]);
  }
  close(alive[0]);  // alive[1] stays open for as long as this process lives
  close(ready[1]);
  char byte = 0;
  if (read(ready[0], &byte, 1) != 1) {
    std::fputs("localkube-pod-init: the pod's PID 1 did not start\n", stderr);
    std::exit(1);
  }
  close(ready[0]);
  return pid;
}

int Hold(const std::vector<std::string>& args) {
  std::string netns, hostname, hosts, resolv_conf, tmp_size = "1g", shm_size = "64m";
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    const std::string& flag = args[i];
    const std::string& value = args[i + 1];
    if (flag == "--netns")
      netns = value;
    else if (flag == "--hostname")
      hostname = value;
    else if (flag == "--hosts")
      hosts = value;
    else if (flag == "--resolv-conf")
      resolv_conf = value;
    else if (flag == "--tmp-size")
      tmp_size = value;
    else if (flag == "--shm-size")
      shm_size = value;
    else
      Usage("hold: unknown flag " + flag);
  }
  if (netns.empty() || hostname.empty() || hosts.empty() || resolv_conf.empty()) {
    Usage("hold needs --netns, --hostname, --hosts and --resolv-conf");
  }
  // Read now: the file may live under the host's /tmp, which the pod's own covers below.
  std::ifstream resolv_in(resolv_conf);
  if (!resolv_in) Die("open " + resolv_conf);
  const std::string resolv_text((std::istreambuf_iterator<char>(resolv_in)),
                                std::istreambuf_iterator<char>());
  if (resolv_text.empty()) Usage("hold: --resolv-conf " + resolv_conf + " is empty");
  int fd = open(netns.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die("open " + netns);
  if (setns(fd, CLONE_NEWNET) != 0) Die("setns " + netns);
  close(fd);
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID) != 0) Die("unshare");
  MakePrivate();
  if (sethostname(hostname.data(), hostname.size()) != 0) Die("sethostname " + hostname);
  // Where /etc/resolv.conf leads (a symlink into /run on some hosts), before /run is covered.
  char resolved[PATH_MAX];
  const std::string resolv_target =
      realpath("/etc/resolv.conf", resolved) != nullptr ? resolved : "/etc/resolv.conf";
  // /etc/hosts first: the file may live under the host's /tmp, which is covered next.
  Mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND);
  Mount(nullptr, "/etc/hosts", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY);
  Mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=" + tmp_size);
  Mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=" + shm_size);
  // A container's own /run: where the ServiceAccount token goes (/var/run/secrets/...), and the
  // host's runtime state stays out of sight.
  Mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m");
  SetUpResolvConf(resolv_target, resolv_text);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  sigaddset(&stop, SIGCHLD);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  const pid_t init = StartPodInit();
  std::fputs("ready\n", stdout);
  std::fflush(stdout);
  for (;;) {
    int sig = 0;
    sigwait(&stop, &sig);
    if (sig != SIGCHLD) return 0;
    if (waitpid(init, nullptr, WNOHANG) == init) {
      std::fputs("localkube-pod-init: the pod's PID 1 ended\n", stderr);
      return 1;
    }
  }
}

}  // namespace
}  // namespace kubetrain::pod_init

int main(int argc, char** argv) {
  if (argc < 2) kubetrain::pod_init::Usage("usage: localkube-pod-init hold|exec ...");
  std::vector<std::string> args(argv + 2, argv + argc);
  std::string mode = argv[1];
  if (mode == "hold") return kubetrain::pod_init::Hold(args);
  if (mode == "exec") return kubetrain::pod_init::Exec(args);
  kubetrain::pod_init::Usage("unknown mode " + mode + "; use hold or exec");
}
