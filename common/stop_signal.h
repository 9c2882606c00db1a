// SIGTERM/SIGINT handling with a deadline. Every program must stop within 2 s of SIGTERM in any
// state (docs/architecture.md §9). Programs stop cleanly by polling the flag; the watchdog is the
// backstop for a wait that cannot be interrupted (a collective inside Gloo or NCCL, a system
// call in a library): once a signal arrives it gives the program `grace` to return from main,
// then logs what happened and ends the process with 128 + the signal's number.
//
//   static std::atomic<bool> stop{false};
//   InstallStopSignals(&stop, absl::Milliseconds(1500));
#pragma once

#include <atomic>

#include "absl/time/time.h"

namespace kubetrain {

// Sets `*stop` on SIGTERM or SIGINT and starts the watchdog. Call once, from main, before any
// other thread starts (the handlers are process-wide). `stop` must outlive the process.
void InstallStopSignals(std::atomic<bool>* stop, absl::Duration grace);

// The signal that set the flag (SIGTERM or SIGINT), or 0 if none arrived.
int StopSignal();

}  // namespace kubetrain
