// kubetrain-entrypoint: runs the program of this task's role in place of itself (exec, so the
// program is the container's process and receives SIGTERM itself). worker/entrypoint/entrypoint.h
// says how the role is chosen.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "common/host_port.h"
#include "common/program.h"
#include "worker/entrypoint/entrypoint.h"

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* tf_config = std::getenv("TF_CONFIG");
  absl::StatusOr<kubetrain::worker::Launch> launch = kubetrain::worker::ChooseLaunch(
      tf_config == nullptr ? std::nullopt : std::optional<std::string>(tf_config), args,
      kubetrain::FreePortOnEveryInterface);
  if (!launch.ok()) {
    std::cerr << "kubetrain-entrypoint: " << launch.status().message() << std::endl;
    return 2;
  }
  for (const auto& [name, value] : launch->default_env) {
    setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
  }
  // The arguments stay out of the log: one may be a --job-secret.
  std::cerr << "kubetrain-entrypoint: " << launch->why << ": exec " << launch->program << std::endl;
  std::vector<char*> exec_argv;
  exec_argv.push_back(launch->program.data());
  for (std::string& a : launch->args) exec_argv.push_back(a.data());
  exec_argv.push_back(nullptr);
  execvp(exec_argv[0], exec_argv.data());
  const int error = errno;
  std::cerr << "kubetrain-entrypoint: cannot run " << launch->program << ": "
            << std::strerror(error) << (error == ENOENT ? " (not on PATH)" : "") << std::endl;
  return error == ENOENT ? 127 : 126;
}
