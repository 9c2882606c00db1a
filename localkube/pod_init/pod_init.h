// What localkube-pod-init's two modes share (pod_init.cc: hold and main; exec.cc: exec).
#pragma once

#include <errno.h>

#include <string>
#include <vector>

namespace kubetrain::pod_init {

// Prints "localkube-pod-init: WHAT: <strerror(err)>" and exits 1.
[[noreturn]] void Die(const std::string& what, int err = errno);
// Prints the misuse and exits 2.
[[noreturn]] void Usage(const std::string& why);
// mount(2), or Die naming the target.
void Mount(const char* source, const std::string& target, const char* type, unsigned long flags,
           const std::string& data = "");
// Mounts made from here on stay in this namespace, and the host's do not come in later.
void MakePrivate();
// In a child right after fork: it gets SIGKILL when the process that forked it dies. `alive` is
// the read end of a pipe whose write end only that process holds, so a hang-up on it means the
// parent died before prctl took effect (getppid() says nothing across PID namespaces).
void DieWithParent(int alive);

// `localkube-pod-init exec ARGS...` (exec.cc).
int Exec(const std::vector<std::string>& args);

}  // namespace kubetrain::pod_init
