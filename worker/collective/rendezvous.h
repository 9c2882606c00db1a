// The key-value store communicators rendezvous through (Gloo's peer addresses, NCCL's unique id).
// The chief hosts it as a small gRPC service (worker/collective/coordinator.h); every rank,
// the chief included, talks to it through this interface.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kubetrain::worker {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Stores `value` under `key` for this rendezvous (overwriting).
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to `timeout` for some rank to set it; DEADLINE_EXCEEDED
  // naming the key when none does.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
};

}  // namespace kubetrain::worker
