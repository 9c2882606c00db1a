#include "common/stop_signal.h"

#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "common/logging.h"

namespace kubetrain {
namespace {

std::atomic<bool>* g_stop = nullptr;
std::atomic<int> g_signal{0};
sem_t g_signalled;  // posted by the handler: sem_post is async-signal-safe

void OnSignal(int sig) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
  if (g_stop != nullptr) g_stop->store(true);
  sem_post(&g_signalled);
}

void Watchdog(absl::Duration grace) {
  while (sem_wait(&g_signalled) != 0 && errno == EINTR) {
  }
  absl::SleepFor(grace);
  const int sig = g_signal.load();
  log::Warn("Did not stop in time after a signal; exiting now",
            {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}, {"grace", grace}});
  _exit(128 + sig);
}

}  // namespace

void InstallStopSignals(std::atomic<bool>* stop, absl::Duration grace) {
  g_stop = stop;
  sem_init(&g_signalled, 0, 0);
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::thread(Watchdog, grace).detach();
}

int StopSignal() { return g_signal.load(); }

}  // namespace kubetrain
