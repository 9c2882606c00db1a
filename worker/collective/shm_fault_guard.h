// Turns the SIGBUS of an access to a shared-memory mapping whose file shrank under it (another
// process truncated it) into an error its owner reports, instead of the death of the process.
//
// The handler, for a fault inside a watched mapping, maps anonymous memory over the whole of it
// and marks it faulted; the faulting access then completes on that memory, as do all later ones,
// and the owner finds the mark at its next check (ShmCommunicator checks after every barrier and
// at the end of every collective) and fails with a clear error, discarding what it read. This
// needs no sigsetjmp/siglongjmp, which would jump over C++ frames (destructors, half-made
// statuses) and would have to wrap every access to the segment, the atomics of the barrier and
// the destructor's goodbye included. The handler is async-signal-safe: it reads lock-free
// atomics, calls mmap (a plain system call in glibc, touching nothing but errno, which it saves
// and restores) and, for a SIGBUS that is not ours, sigaction and raise. A SIGBUS outside every
// watched mapping, or sent by kill(), goes to the handler installed before (or the default
// action: the process dies of SIGBUS as it would have without us).
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"

namespace kubetrain::worker {

// Watches one mapping for as long as it lives. Thread-safe; movable.
class ShmFaultGuard {
 public:
  // The most mappings watched at once in a process.
  static constexpr int kMaxWatched = 32;

  // Watches [base, base + bytes) (installing the handler the first time). RESOURCE_EXHAUSTED
  // when kMaxWatched mappings are watched already.
  static absl::StatusOr<ShmFaultGuard> Watch(void* base, size_t bytes);

  ShmFaultGuard() = default;
  ShmFaultGuard(ShmFaultGuard&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  ShmFaultGuard& operator=(ShmFaultGuard&& other) noexcept;
  ~ShmFaultGuard();  // stops watching; unmap the mapping only after

  // Whether an access hit a page past the end of the mapping's file: what the mapping holds
  // since is this process's own zeros.
  bool faulted() const;

 private:
  explicit ShmFaultGuard(int slot) : slot_(slot) {}
  int slot_ = -1;
};

}  // namespace kubetrain::worker
