// Starts a program of this build for a test, its stdout and stderr into a log file the test reads
// (and names in its failures).
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace kubetrain::worker::testing {

// Runs `args` (args[0] a path) with stdout and stderr in `log`, created or truncated; the pid,
// or -1 when fork fails. The caller reaps (waitpid) or kills the child.
inline pid_t SpawnLogged(std::vector<std::string> args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace kubetrain::worker::testing
