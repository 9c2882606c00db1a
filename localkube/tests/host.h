// Test support for localkube tests that use this host: a folder of the test's own, a file's
// text and mode, a shell command's output, kubectl, and the localkube binary started as a process.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/testing/eventually.h"

extern char** environ;

namespace kubetrain::localkube::testing {

// <temp>/`prefix`-<pid>-<test name>, empty: what an earlier run left there is removed.
inline std::string TestDir(const std::string& prefix) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     absl::StrCat(prefix, "-", getpid(), "-",
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                        .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The whole text of the file at `path`; empty when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The permission bits (setuid, setgid and sticky included) of the file at `path`; -1 when there is
// none.
inline int FileMode(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

// Runs `command` through the shell and returns what it wrote (stdout and stderr); its exit status
// in `*status` when given (-1 when it did not exit normally).
inline std::string Shell(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    if (status) *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int st = pclose(pipe);
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// In targets that define where the tools and the localkube binary are (localkube_test):
#if defined(KUBETRAIN_TOOLS_BIN) && defined(LOCALKUBE_BINARY)

// kubectl: the project's .tools/bin copy, else the one on PATH; empty when there is none.
inline std::string FindKubectl() {
  std::string tools = std::string(KUBETRAIN_TOOLS_BIN) + "/kubectl";
  if (access(tools.c_str(), X_OK) == 0) return tools;
  int status = 0;
  std::string found = Shell("command -v kubectl", &status);
  return status == 0 ? std::string(absl::StripTrailingAsciiWhitespace(found)) : "";
}

// Starts the localkube binary on a free port with `flags`, writing its output to `dir`/out, and
// waits (up to 20 s) for the address it writes to `dir`/address. Its pid in `*pid`, the port it
// listens on in `*port`.
inline void StartLocalkube(const std::string& dir, const std::vector<std::string>& flags,
                           pid_t* pid, int* port) {
  std::vector<std::string> args = {LOCALKUBE_BINARY, "--port", "0", "--address-file",
                                   dir + "/address"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, (dir + "/out").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  ASSERT_EQ(posix_spawn(pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  std::string address;
  ASSERT_TRUE(::kubetrain::testing::Eventually(
      [&] {
        std::ifstream in(dir + "/address");
        return std::getline(in, address) && !address.empty();
      },
      absl::Seconds(20)))
      << "localkube did not start";
  *port = std::stoi(address.substr(address.rfind(':') + 1));
}

#endif  // KUBETRAIN_TOOLS_BIN && LOCALKUBE_BINARY

}  // namespace kubetrain::localkube::testing
