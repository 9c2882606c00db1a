#include <signal.h>

#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "operator/cli/commands.h"

namespace {

// Set by SIGINT/SIGTERM; `kubetrain run` stops every child and exits 130.
std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  return kubetrain::cli::Main(args, std::cout, std::cerr, g_stop);
}
