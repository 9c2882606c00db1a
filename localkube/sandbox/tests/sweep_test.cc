#include "localkube/sandbox/sweep.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/testing/eventually.h"
#include "localkube/sandbox/tests/test_net.h"
#include "localkube/sandbox/tools.h"

namespace kubetrain::sandbox {
namespace {

using ::kubetrain::sandbox::testing::ObjectsOf;
using ::kubetrain::testing::Eventually;
using ::testing::Contains;

// A sandbox_peer holding a two-node network of family "kt" with a sandbox on each node.
struct Holder {
  std::unique_ptr<Process> process;
  std::string prefix;
};

absl::StatusOr<Holder> StartHolder() {
  ProcessOptions options{{SANDBOX_PEER_BINARY, "hold", "kt", "2"},
                         {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}}};
  auto process = Process::Start(options);
  if (!process.ok()) return process.status();
  std::string output;
  // Its log lines come first on the same output; the line "held PREFIX\n" is one write, which a
  // pipe delivers whole.
  if (!testing::ReadUntil(**process, "held ", &output, absl::Seconds(30))) {
    return absl::InternalError("sandbox_peer hold said: " + output);
  }
  const size_t at = output.find("held ") + 5;
  std::string prefix = output.substr(at, output.find('\n', at) - at);
  return Holder{std::move(*process), prefix};
}

void Kill(Holder& holder) {
  holder.process->Signal(SIGKILL);
  std::string ignored;
  ASSERT_TRUE(testing::WaitExit(*holder.process, &ignored, absl::Seconds(10)));
}

TEST(SandboxSweep, NextCreateSweepsWhatAKilledInstanceLeft) {
  CREATE_NETWORK_OR_SKIP(probe, NetworkOptions{});  // skips where the machine cannot
  probe.reset();
  auto holder = StartHolder();
  ASSERT_TRUE(holder.ok()) << holder.status();
  Kill(*holder);
  const std::string prefix = holder->prefix;
  // SIGKILL ran no destructor: its namespaces, veths, bridges, ifbs (and their qdiscs and
  // routes), rules and lock file are all still there.
  const std::set<std::string> left = ObjectsOf(prefix);
  EXPECT_THAT(left, Contains("netns:" + prefix + "-1-held-1"));
  EXPECT_THAT(left, Contains("link:" + prefix + "b1"));
  EXPECT_THAT(left, Contains("link:" + prefix + "i0"));
  EXPECT_THAT(left, Contains("link:" + prefix + "v1s1"));
  EXPECT_THAT(left, Contains("rule:" + prefix + "b0"));
  EXPECT_THAT(left, Contains("lock:" + prefix + ".lock"));

  CREATE_NETWORK_OR_SKIP(next, NetworkOptions{});
  // Another start of the family at the same moment (a parallel test) may be the one sweeping,
  // holding the killed instance's lock a little longer than this Create.
  EXPECT_TRUE(Eventually([&] { return ObjectsOf(prefix).empty(); }))
      << ::testing::PrintToString(ObjectsOf(prefix));
  auto routes = RunToolJson("ip", {"route", "show"});
  ASSERT_TRUE(routes.ok());
  for (const auto& route : *routes) {
    EXPECT_FALSE(absl::StartsWith(route.value("dev", ""), prefix)) << route.dump();
  }
}

TEST(SandboxSweep, LiveInstanceIsNeverSwept) {
  CREATE_NETWORK_OR_SKIP(probe, NetworkOptions{});
  probe.reset();
  auto holder = StartHolder();
  ASSERT_TRUE(holder.ok()) << holder.status();
  const std::set<std::string> live = ObjectsOf(holder->prefix);
  auto swept = SweepStale("kt");
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_THAT(*swept, ::testing::Not(Contains(holder->prefix)));
  EXPECT_EQ(ObjectsOf(holder->prefix), live);

  Kill(*holder);
  swept = SweepStale("kt");
  ASSERT_TRUE(swept.ok()) << swept.status();
  // This sweep removed it, or a parallel test's start is removing it.
  EXPECT_TRUE(Eventually([&] { return ObjectsOf(holder->prefix).empty(); }));
}

}  // namespace
}  // namespace kubetrain::sandbox
