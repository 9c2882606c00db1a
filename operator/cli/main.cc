#include <signal.h>

#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "common/stop_signal.h"
#include "operator/cli/commands.h"

namespace {

// Set by SIGINT/SIGTERM; `kubetrain run` stops every child and exits 130.
std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "run") {
    // `run` gives its tasks --grace-period to stop, as a kubelet would, then kills them.
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  } else {
    // validate, render, convert: a parse that does not notice the flag still ends in time.
    kubetrain::InstallStopSignals(&g_stop, absl::Milliseconds(1500));
  }
  signal(SIGPIPE, SIG_IGN);
  return kubetrain::cli::Main(args, std::cout, std::cerr, g_stop);
}
