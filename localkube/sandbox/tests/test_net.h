// Test support for sandbox networks: creating one or skipping where the machine cannot, adding
// sandboxes to it, TCP between sandboxes with bounded waits, and listing the host's objects of an
// instance.
#pragma once

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "localkube/sandbox/network.h"

// Creates a sandbox network into `var`, or skips the test saying why the machine cannot
// (Create's FAILED_PRECONDITION: not root, no network namespaces, no iproute2).
#define CREATE_NETWORK_OR_SKIP(var, ...)                                   \
  auto var##_created = ::kubetrain::sandbox::Network::Create(__VA_ARGS__); \
  if (absl::IsFailedPrecondition(var##_created.status())) {                \
    GTEST_SKIP() << var##_created.status().message();                      \
  }                                                                        \
  ASSERT_TRUE(var##_created.ok()) << var##_created.status();               \
  std::unique_ptr<::kubetrain::sandbox::Network> var = std::move(*var##_created)

// Adds sandbox `name` on node `node` of `net` (a Network*) and binds `var` to it, a const
// Sandbox&; fails the test with AddSandbox's error where it cannot.
#define ADD_SANDBOX(var, net, node, name)                \
  auto var##_added = (net)->AddSandbox(node, name);      \
  ASSERT_TRUE(var##_added.ok()) << var##_added.status(); \
  const ::kubetrain::sandbox::Sandbox& var = **var##_added

namespace kubetrain::sandbox::testing {

// A TCP listener on 0.0.0.0, port chosen by the kernel, inside `sandbox`.
struct Listener {
  int fd = -1;
  int port = 0;
};
absl::StatusOr<Listener> Listen(const Sandbox& sandbox);
// A TCP listener in the host's namespace on `ip` (a node gateway), port chosen by the kernel.
absl::StatusOr<Listener> ListenOnHost(const std::string& ip);
// A TCP connection from inside `from` to ip:port, or an error once `timeout` has passed (or
// when refused or unreachable).
absl::StatusOr<int> Connect(const Sandbox& from, const std::string& ip, int port,
                            absl::Duration timeout);
// Accepts one connection within `timeout` and echoes it until its end, on the calling thread.
absl::Status EchoOnce(int listener, absl::Duration timeout);
// Sends `message`, half-closes, and returns what came back.
absl::StatusOr<std::string> Exchange(int fd, const std::string& message);

// The host's objects named with `prefix`: "netns:<name>", "link:<name>", "rule:<iif>" and
// "lock:<file>" for files in `lock_dir` starting with it.
std::set<std::string> ObjectsOf(const std::string& prefix,
                                const std::string& lock_dir = "/run/kubetrain-sandbox");

// Reads `process`'s output until it holds `needle` (true) or `timeout` passes or it ends.
bool ReadUntil(Process& process, const std::string& needle, std::string* output,
               absl::Duration timeout);
// Waits up to `timeout` for `process` to end; its exit code.
std::optional<int> WaitExit(Process& process, std::string* output, absl::Duration timeout);

}  // namespace kubetrain::sandbox::testing
