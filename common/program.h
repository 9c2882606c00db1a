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

// For the programs that move model-sized messages (kubetrain-ps, kubetrain-worker and the
// benchmarks of their exchange): glibc's malloc keeps each freed receive or answer buffer for the
// next one instead of handing its pages back. By default a buffer of 128 KiB or more, until as
// large a one has been freed, is its own mmap(), and the heap is trimmed whenever its free top
// passes twice that, so buffers that come and go each step land in fresh pages that the kernel
// zeroes on first touch; gRPC's many threads each warm an arena of their own. Sets glibc's mmap
// threshold to its most (32 MiB), the trim threshold to 1 GiB and one arena per core, unless the
// environment already tunes malloc (GLIBC_TUNABLES glibc.malloc.*, MALLOC_*_). On the ps-shards
// exchange between 8 emulated nodes, a step took 1.61-1.91 s against 1.89-2.05 s without
// (docs/architecture.md §8). False where the allocator did not take them (a sanitizer's, or one
// the environment tunes): the program runs as before.
bool SetUpLargeMessageAllocator();

}  // namespace kubetrain
