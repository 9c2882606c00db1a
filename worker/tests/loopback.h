// Loopback addresses for worker tests.
#pragma once

#include <unistd.h>

#include <string>

#include "common/testing/loopback.h"

namespace kubetrain::worker::testing {

// A loopback port nothing listens on (bound, then released).
inline std::string ClosedAddress() {
  const ::kubetrain::testing::LoopbackListener listener = ::kubetrain::testing::ListenOnLoopback(1);
  close(listener.fd);
  return "127.0.0.1:" + std::to_string(listener.port);
}

}  // namespace kubetrain::worker::testing
