#include <signal.h>

#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "common/program.h"
#include "common/stop_signal.h"
#include "operator/cli/commands.h"

namespace {

// Set by SIGINT/SIGTERM; `kubetrain run` stops every child and exits 130.
std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

// `kubetrain run` of an elastic job: SIGUSR1 adds a worker, SIGUSR2 removes one.
std::atomic<int> g_scale{0};
static_assert(std::atomic<int>::is_always_lock_free);

void OnScaleSignal(int signal) { g_scale.fetch_add(signal == SIGUSR1 ? 1 : -1); }

}  // namespace

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "run") {
    // `run` gives its tasks --grace-period to stop, as a kubelet would, then kills them.
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    struct sigaction scale = {};
    scale.sa_handler = OnScaleSignal;
    sigemptyset(&scale.sa_mask);
    sigaction(SIGUSR1, &scale, nullptr);
    sigaction(SIGUSR2, &scale, nullptr);
  } else {
    // validate, render, convert: a parse that does not notice the flag still ends in time.
    kubetrain::InstallStopSignals(&g_stop, absl::Milliseconds(1500));
  }
  signal(SIGPIPE, SIG_IGN);
  return kubetrain::cli::Main(args, std::cout, std::cerr, g_stop, &g_scale);
}
