// "host:port" strings: the one place that splits and joins them (IPv6 hosts in brackets).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain {

// "[::1]:80" for IPv6 hosts, "host:80" otherwise.
std::string JoinHostPort(absl::string_view host, int port);

// An address to dial ("fmnist-ps-0.fmnist:2222", "[::1]:2222"): a host and a port in 1-65535.
// INVALID_ARGUMENT naming the address otherwise.
absl::Status SplitHostPort(absl::string_view address, std::string* host, int* port);

// An address to listen on: port 0 picks a free port, and an empty host (":8080") means every
// interface (0.0.0.0).
absl::Status SplitListenAddress(absl::string_view address, std::string* host, int* port);

// A port on 127.0.0.1 that was free a moment ago: bound to port 0, read back, released. Whoever
// takes it next may lose a race for it (a clash shows up as a bind error, never silently).
absl::StatusOr<int> FreeLoopbackPort();
// `n` such ports, all different: each stays bound until all are read, so the kernel cannot hand
// out one of them twice (as `n` calls of FreeLoopbackPort may).
absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n);
// As FreeLoopbackPort, a port free on every address of this host (0.0.0.0).
absl::StatusOr<int> FreePortOnEveryInterface();

}  // namespace kubetrain
