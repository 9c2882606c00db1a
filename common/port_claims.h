// Loopback ports claimed among the processes of this machine (its network namespace) that take
// their ports through ClaimFreeLoopbackPorts: what `kubetrain run` puts in its tasks' TF_CONFIG,
// which the tasks bind a moment later. A free port alone (FreeLoopbackPorts) is free only until
// someone else takes it, and two runs started at once can each be given the same one; a claim
// holds the port from the others until it is released.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain {

// The claims on some ports: one abstract Unix socket each, named "kubetrain-port-<port>", which
// no other socket in the network namespace can take while it is bound. The kernel releases them
// when the process ends, however it ends, so nothing is left behind. Move-only.
class PortClaims {
 public:
  PortClaims() = default;
  ~PortClaims();
  PortClaims(PortClaims&& other) noexcept;
  PortClaims& operator=(PortClaims&& other) noexcept;
  PortClaims(const PortClaims&) = delete;
  PortClaims& operator=(const PortClaims&) = delete;

  const std::vector<int>& ports() const { return ports_; }
  // Takes `other`'s claims as well (a job growing by more tasks).
  void Add(PortClaims other);

 private:
  friend absl::StatusOr<PortClaims> ClaimPorts(int, const std::function<absl::StatusOr<int>()>&);
  void Release();

  std::vector<int> ports_;
  std::vector<int> fds_;
};

// `n` different loopback ports, free a moment ago and claimed by no other process's PortClaims.
// A port outside this convention can still be taken before its task binds it (a clash shows up
// as that task's bind error, never silently).
absl::StatusOr<PortClaims> ClaimFreeLoopbackPorts(int n);

// ClaimFreeLoopbackPorts with the candidates from `next` (for tests): candidates already claimed
// (here or elsewhere) or repeated are skipped; UNAVAILABLE after 64·n + 64 candidates without `n`
// claims, or when `next` fails.
absl::StatusOr<PortClaims> ClaimPorts(int n, const std::function<absl::StatusOr<int>()>& next);

}  // namespace kubetrain
