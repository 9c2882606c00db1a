// The `kubetrain` command-line tool's subcommands, as functions over streams so tests can run
// them in-process. Each returns the process exit code.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace kubetrain::cli {

// kubetrain validate FILE...: exit 0 when every TrainingJob in every file is valid, else 1 with
// every problem on `err`.
int Validate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// kubetrain render FILE: the Service and Pods the operator would create, as YAML (or JSON).
int Render(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Dispatches argv to a subcommand; prints usage for `help`, `--help` or no command.
int Main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kubetrain::cli
