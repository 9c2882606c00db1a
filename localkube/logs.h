// Where pods/log reads from: implemented by the kubelet, consumed by the HTTP server.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kubetrain::localkube {

class LogSource {
 public:
  virtual ~LogSource() = default;
  // The log file of a container's current (or previous) run. Each line is
  // "<RFC3339Nano timestamp> <text>". NotFound/InvalidArgument as Kubernetes reports them.
  virtual absl::StatusOr<std::string> LogPath(const std::string& ns, const std::string& pod,
                                              const std::string& container, bool previous) = 0;
  // True while the container's current run may still append to its log.
  virtual bool Running(const std::string& ns, const std::string& pod,
                       const std::string& container) = 0;
};

}  // namespace kubetrain::localkube
