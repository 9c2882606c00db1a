// Process-wide settings every kubetrain program makes first thing in main(), before it starts a
// thread. Tests do not call it, so they keep the checks it turns off.
#pragma once

namespace kubetrain {

// In an optimised build (NDEBUG), turns off absl::Mutex's deadlock detection. Upstream Abseil
// compiles it out of release builds; Debian's libabsl is built without NDEBUG, so every program
// linking it records each Mutex acquisition in one process-wide lock graph, under a global lock,
// gRPC's own mutexes included. On the ps's exchange between 8 emulated nodes a step took 2.40-2.51
// core-seconds without it against 2.64-2.94 with it (docs/architecture.md §8). Debug builds and
// the test binaries keep the detection.
void SetUpProgram();

}  // namespace kubetrain
