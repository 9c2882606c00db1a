// A ps client following its ps's name to a new address, in a mount namespace of its own whose
// /etc/hosts this program controls (ps/tests/client_resolve_test.cc runs it as root): the name
// maps to 127.0.0.2 where the first ps serves, then, as when a ps pod is recreated, to 127.0.0.3
// where a second one serves on the same port. Exits 0 once the client reaches the second ps
// within 10 s, 1 if it does not, 77 when it cannot set up its namespace.
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "prometheus/registry.h"
#include "ps/client.h"
#include "ps/metrics.h"
#include "ps/server.h"

namespace {

using namespace kubetrain::ps;  // NOLINT: a test program

int Fail(const std::string& what) {
  std::fprintf(stderr, "resolve_helper: %s\n", what.c_str());
  return 1;
}

// Rewritten in place: a bind mount pins the file, so a rename would not be seen.
void Map(const std::string& hosts, const std::string& name, const std::string& ipv4) {
  std::ofstream(hosts, std::ios::trunc) << "127.0.0.1 localhost\n"
                                        << ipv4 << " " << name << "\n::1 " << name << "\n";
}

int Run(const std::string& hosts) {
  const std::string name = "kt-ps-0.moves.test";
  Map(hosts, name, "127.0.0.2");
  prometheus::Registry registry;
  PsMetrics metrics(registry);
  auto old_ps = PsServer::Start({.address = "127.0.0.2:0"}, &metrics);
  if (!old_ps.ok()) return Fail(absl::StrCat("first ps: ", old_ps.status().ToString()));
  const std::string address = (*old_ps)->address();
  const std::string port = address.substr(address.rfind(':') + 1);
  auto plan = PlacementPlan::Build({{"w", 16}}, 1);
  if (!plan.ok()) return Fail(plan.status().ToString());
  auto client = PsClient::Create(
      {name + ":" + port}, *plan,
      {.rpc_timeout = absl::Seconds(2),
       .wait_ready_backoff = {.initial = absl::Milliseconds(50), .max = absl::Milliseconds(200)}});
  if (!client.ok()) return Fail(client.status().ToString());
  absl::Status ready = (*client)->WaitReady(absl::Seconds(20), false);
  if (!ready.ok()) return Fail(absl::StrCat("first ps not reached: ", ready.ToString()));
  // The pod is recreated: its old address goes, its name maps to the new one, served there.
  old_ps->reset();
  Map(hosts, name, "127.0.0.3");
  auto new_ps = PsServer::Start({.address = "127.0.0.3:" + port}, &metrics);
  if (!new_ps.ok()) return Fail(absl::StrCat("second ps: ", new_ps.status().ToString()));
  const absl::Time start = absl::Now();
  ready = (*client)->WaitReady(absl::Seconds(10), false);
  if (!ready.ok()) return Fail(absl::StrCat("the new address not reached: ", ready.ToString()));
  std::printf("reached the recreated ps in %s\n",
              absl::FormatDuration(absl::Now() - start).c_str());
  return 0;
}

}  // namespace

int main() {
  char dir[] = "/tmp/ps-resolve-helper.XXXXXX";
  if (mkdtemp(dir) == nullptr) return 77;
  const std::string hosts = std::string(dir) + "/hosts";
  std::ofstream(hosts) << "127.0.0.1 localhost\n";
  int rc = 77;
  if (unshare(CLONE_NEWNS) == 0 &&
      mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
      mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) == 0) {
    rc = Run(hosts);
  } else {
    std::perror("resolve_helper: a mount namespace with its own /etc/hosts");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}
