// The `kubetrain` command-line tool's subcommands, as functions over streams so tests can run
// them in-process. Each returns the process exit code.
#pragma once

#include <atomic>
#include <ostream>
#include <string>
#include <vector>

namespace kubetrain::cli {

// kubetrain validate FILE...: exit 0 when every TrainingJob (or Kubeflow TFJob, held to the rules
// of the TrainingJob it converts to) in every file is valid, else 1 with every problem on `err`.
int Validate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// kubetrain render FILE: the Service and Pods the operator would create, as YAML (or JSON); for
// a Kubeflow TFJob, those Kubeflow's operator creates (api::RenderTfJob).
// Objects are built and written one at a time, and `stop` ends the output between two of them
// (exit 130).
int Render(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
           const std::atomic<bool>& stop);

// kubetrain run FILE: the job as local processes until it succeeds, fails or `stop` is set.
// `scale` (may be null): Worker replicas an elastic job should gain (> 0) or lose (< 0), taken
// as the job runs (local::LaunchOptions::scale).
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        const std::atomic<bool>& stop, std::atomic<int>* scale = nullptr);

// kubetrain convert FILE: the TrainingJob equivalent to each Kubeflow TFJob in FILE on `out`
// (YAML, or JSON), what does not carry over on `err`.
int Convert(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Dispatches argv to a subcommand; prints usage for `help`, `--help` or no command. `stop` is set
// by the signal handler of main (SIGINT, SIGTERM), `scale` by SIGUSR1 (+1) and SIGUSR2 (-1).
int Main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
         const std::atomic<bool>& stop, std::atomic<int>* scale = nullptr);

}  // namespace kubetrain::cli
