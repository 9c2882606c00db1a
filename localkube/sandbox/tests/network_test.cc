#include "localkube/sandbox/network.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/sandbox/names.h"
#include "localkube/sandbox/tests/test_net.h"
#include "localkube/sandbox/tools.h"

namespace kubetrain::sandbox {
namespace {

using ::kubetrain::sandbox::testing::Connect;
using ::kubetrain::sandbox::testing::EchoOnce;
using ::kubetrain::sandbox::testing::Exchange;
using ::kubetrain::sandbox::testing::Listen;
using ::kubetrain::sandbox::testing::Listener;
using ::kubetrain::sandbox::testing::ListenOnHost;
using ::kubetrain::sandbox::testing::ObjectsOf;
using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using ::testing::IsEmpty;

const std::map<std::string, std::string> kEnv = {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}};

// What `from` gets back for `message` from an echo server in `to` (on a thread here), or
// "error: ..." saying why nothing came back.
std::string EchoBetween(const Sandbox& from, const Sandbox& to, const std::string& message) {
  absl::StatusOr<Listener> listener = Listen(to);
  if (!listener.ok()) return "error: " + listener.status().ToString();
  auto echo = std::async(std::launch::async, EchoOnce, listener->fd, absl::Seconds(10));
  absl::StatusOr<int> fd = Connect(from, to.ip(), listener->port, absl::Seconds(5));
  absl::StatusOr<std::string> reply = fd.ok() ? Exchange(*fd, message) : fd.status();
  if (fd.ok()) ::close(*fd);
  if (!fd.ok()) ::shutdown(listener->fd, SHUT_RDWR);  // the echo thread stops waiting
  echo.wait();
  ::close(listener->fd);
  return reply.ok() ? *reply : "error: " + reply.status().ToString();
}

// Namespaces, links and rules are gone at once. The lock file is too, but a start of another
// test running in parallel may briefly make (and remove) one while it looks at the instance.
void ExpectAllGone(const std::string& prefix) {
  std::set<std::string> left = ObjectsOf(prefix);
  std::erase_if(left, [](const std::string& object) { return object.starts_with("lock:"); });
  EXPECT_THAT(left, IsEmpty());
  EXPECT_TRUE(Eventually([&] { return ObjectsOf(prefix).empty(); }));
}

TEST(SandboxNetwork, RejectsBadOptionsNamingTheField) {
  EXPECT_THAT(Network::Create({.nodes = 0}).status().message(), ::testing::HasSubstr("nodes"));
  EXPECT_THAT(Network::Create({.nodes = 17}).status().message(), ::testing::HasSubstr("nodes"));
  EXPECT_THAT(Network::Create({.prefix = "kt12345"}).status().message(),
              ::testing::HasSubstr("prefix"));
  EXPECT_THAT(Network::Create({.family = "KT"}).status().message(), ::testing::HasSubstr("family"));
  EXPECT_THAT(Network::Create({.uplink_bits_per_second = 10}).status().message(),
              ::testing::HasSubstr("uplink_bits_per_second"));
  EXPECT_TRUE(absl::IsInvalidArgument(Network::Create({.block = 32}).status()));
}

TEST(SandboxNetwork, ProcessesInTwoSandboxesOfOneNodeTalk) {
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 1});
  ADD_SANDBOX(a, net, 0, "server");
  ADD_SANDBOX(b, net, 0, "client");
  EXPECT_NE(a.ip(), b.ip());
  auto server = Process::Start(a.Wrap({{SANDBOX_PEER_BINARY, "echo-server", "7070"}, kEnv}));
  ASSERT_TRUE(server.ok()) << server.status();
  std::string said;
  ASSERT_TRUE(testing::ReadUntil(**server, "listening", &said, absl::Seconds(10))) << said;
  auto client = Process::Start(
      b.Wrap({{SANDBOX_PEER_BINARY, "echo-client", a.ip(), "7070", "hello-node"}, kEnv}));
  ASSERT_TRUE(client.ok()) << client.status();
  std::string reply;
  EXPECT_EQ(testing::WaitExit(**client, &reply, absl::Seconds(10)), 0) << reply;
  EXPECT_EQ(reply, "hello-node\n");
  EXPECT_EQ(testing::WaitExit(**server, &said, absl::Seconds(10)), 0) << said;
}

TEST(SandboxNetwork, SandboxesOnDifferentNodesTalkThroughTheHost) {
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 3});
  ADD_SANDBOX(a, net, 0, "a");
  ADD_SANDBOX(c, net, 2, "c");
  EXPECT_NE(net->node_cidr(0), net->node_cidr(2));
  EXPECT_EQ(EchoBetween(a, c, "across"), "across");
  EXPECT_EQ(EchoBetween(c, a, "and back"), "and back");
}

// A pod recreated on a node (a ps restarted, a job replaced) is reached from the other nodes at
// once. The host's neighbour table may still hold the MAC of a sandbox removed from the node
// (REACHABLE for up to about 30 s, where another sandbox keeps the node's bridge up): a new
// sandbox must not be held back by it.
TEST(SandboxNetwork, ASandboxAddedAfterARemovedOneIsReachedFromAnotherNodeAtOnce) {
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 3});
  ASSERT_THAT(net->AddSandbox(0, "keep"), IsOk());  // keeps node 0's bridge up
  ADD_SANDBOX(a, net, 0, "a");
  ADD_SANDBOX(c, net, 2, "c");
  ASSERT_EQ(EchoBetween(c, a, "first"), "first");  // the host has resolved a's MAC
  const std::string a_ip = a.ip();
  ASSERT_TRUE(net->RemoveSandbox("a").ok());
  ADD_SANDBOX(b, net, 0, "b");
  // The removed sandbox's address is not handed out again at once (as host-local IPAM hands out
  // addresses round-robin).
  EXPECT_NE(b.ip(), a_ip);
  EXPECT_EQ(EchoBetween(c, b, "second"), "second");
}

TEST(SandboxNetwork, CutNodeIsUnreachableUntilHealed) {
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 2});
  ADD_SANDBOX(a, net, 0, "a");
  ADD_SANDBOX(b, net, 1, "b");
  ADD_SANDBOX(b2, net, 1, "b2");
  // Listeners that answer when the network lets them: in a, in b, and on the host at b's node
  // gateway.
  absl::StatusOr<Listener> in_a = Listen(a), in_b = Listen(b);
  absl::StatusOr<Listener> on_host = ListenOnHost(net->node_gateway(1));
  ASSERT_TRUE(in_a.ok() && in_b.ok() && on_host.ok());
  auto reaches = [](const Sandbox& from, const std::string& ip, int port) {
    absl::StatusOr<int> fd = Connect(from, ip, port, absl::Seconds(1));
    if (fd.ok()) ::close(*fd);
    return fd.ok();
  };
  ASSERT_TRUE(reaches(a, b.ip(), in_b->port));
  ASSERT_TRUE(reaches(b, a.ip(), in_a->port));
  ASSERT_TRUE(reaches(b, net->node_gateway(1), on_host->port));

  ASSERT_TRUE(net->CutNode(1).ok());
  EXPECT_TRUE(net->is_cut(1));
  EXPECT_FALSE(reaches(a, b.ip(), in_b->port));
  EXPECT_FALSE(reaches(b, a.ip(), in_a->port));
  EXPECT_FALSE(reaches(b, net->node_gateway(1), on_host->port));
  // Behind the cut, the node's own sandboxes still talk.
  EXPECT_EQ(EchoBetween(b2, b, "inside"), "inside");

  ASSERT_TRUE(net->HealNode(1).ok());
  EXPECT_TRUE(Eventually([&] { return EchoBetween(a, b, "after") == "after"; }));
  EXPECT_TRUE(reaches(b, net->node_gateway(1), on_host->port));
  for (int fd : {in_a->fd, in_b->fd, on_host->fd}) ::close(fd);
}

// A bulk TCP transfer from `from` to `to`; the rate the receiver saw, bit/s.
double MeasureBitsPerSecond(const Sandbox& from, const Sandbox& to, size_t bytes) {
  absl::StatusOr<Listener> listener = Listen(to);
  if (!listener.ok()) return 0;
  auto receive = std::async(std::launch::async, [&]() -> double {
    int peer = ::accept(listener->fd, nullptr, nullptr);
    if (peer < 0) return 0;
    const absl::Time start = absl::Now();
    size_t got = 0;
    std::vector<char> buffer(1 << 16);
    for (ssize_t n; (n = ::read(peer, buffer.data(), buffer.size())) > 0;) got += n;
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    ::close(peer);
    return got == bytes ? got * 8 / seconds : 0;
  });
  absl::StatusOr<int> fd = Connect(from, to.ip(), listener->port, absl::Seconds(5));
  if (fd.ok()) {
    timeval limit = {.tv_sec = 20, .tv_usec = 0};
    ::setsockopt(*fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
    std::vector<char> data(bytes, 'x');
    for (size_t sent = 0; sent < bytes;) {
      ssize_t n = ::write(*fd, data.data() + sent, bytes - sent);
      if (n <= 0) break;
      sent += n;
    }
    ::close(*fd);
  } else {
    ::shutdown(listener->fd, SHUT_RDWR);
  }
  double rate = receive.get();
  ::close(listener->fd);
  return rate;
}

TEST(SandboxNetwork, ShapedUplinkCarriesBulkTransferAtAboutItsRateBothWays) {
  constexpr double kRate = 50'000'000;
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 2, .uplink_bits_per_second = kRate});
  ASSERT_TRUE(net->SetUplinkRate(1, std::nullopt).ok());  // only node 0's uplink on the path
  ADD_SANDBOX(a, net, 0, "a");
  ADD_SANDBOX(b, net, 1, "b");
  constexpr size_t kBytes = 6 << 20;  // about 1 s at the rate
  const double out = MeasureBitsPerSecond(a, b, kBytes);
  const double in = MeasureBitsPerSecond(b, a, kBytes);
  RecordProperty("out_mbit_s", absl::StrCat(out / 1e6));
  RecordProperty("in_mbit_s", absl::StrCat(in / 1e6));
  std::cout << "node 0 uplink at 50 Mbit/s: out " << out / 1e6 << " Mbit/s, in " << in / 1e6
            << " Mbit/s\n";
  EXPECT_GT(out, 0.70 * kRate);
  EXPECT_LT(out, 1.05 * kRate);
  EXPECT_GT(in, 0.70 * kRate);
  EXPECT_LT(in, 1.05 * kRate);
}

// A link's bucket starts full; what it lets through above the rate is its burst. A 2 MiB
// transfer at 1 Gbit/s takes 16.8 ms at the rate: with a 1 ms bucket (125 KB) the receiver sees
// 0.94 Gbit/s, with the 10 ms one (1.25 MB) the links had before, 1.8 Gbit/s. The bound is
// one-sided: a busy machine only makes the transfer slower.
TEST(SandboxNetwork, ShortTransferOnAnIdleLinkDoesNotBeatTheRate) {
  constexpr double kRate = 1'000'000'000;
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 2, .uplink_bits_per_second = kRate});
  ADD_SANDBOX(a, net, 0, "a");
  ADD_SANDBOX(b, net, 1, "b");
  const double rate = MeasureBitsPerSecond(a, b, 2 << 20);
  std::cout << "2 MiB over an idle 1 Gbit/s uplink: " << rate / 1e6 << " Mbit/s\n";
  EXPECT_GT(rate, 0);
  EXPECT_LT(rate, 1.2 * kRate);
}

// What `dev`'s tc class `id` ("1:1") has sent: bytes and packets; -1 where there is no such class.
// tc prints classes as text only ("class htb 1:1 parent ...", then " Sent B bytes P pkt ...").
std::pair<int64_t, int64_t> ClassSent(const std::string& dev, const std::string& id) {
  absl::StatusOr<std::string> out = RunTool("tc", {"-s", "class", "show", "dev", dev});
  if (!out.ok()) return {-1, -1};
  bool ours = false;
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() >= 3 && words[0] == "class") ours = words[2] == id;
    int64_t bytes = 0, packets = 0;
    if (ours && words.size() >= 5 && words[0] == "Sent" && absl::SimpleAtoi(words[1], &bytes) &&
        absl::SimpleAtoi(words[3], &packets)) {
      return {bytes, packets};
    }
  }
  return {-1, -1};
}

// With acks-first uplinks a bulk transfer still runs at the rate; the receiving node's uplink
// sends its acknowledgements through the class that goes first, and the sender's data through
// the bulk class. A cut and a heal rebuild the queues.
TEST(SandboxNetwork, AcksFirstUplinkSendsAcknowledgementsAheadOfTheBulkAtTheSameRate) {
  constexpr double kRate = 50'000'000;
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 2,
                                             .uplink_bits_per_second = kRate,
                                             .uplink_queue = UplinkQueue::kAcksFirst});
  ADD_SANDBOX(a, net, 0, "a");
  ADD_SANDBOX(b, net, 1, "b");
  const std::string out_of_a = net->prefix() + "i0", out_of_b = net->prefix() + "i1";
  constexpr size_t kBytes = 6 << 20;  // about 1 s at the rate, over 4,000 segments
  const double rate = MeasureBitsPerSecond(a, b, kBytes);
  std::cout << "node 0 to node 1, acks-first uplinks at 50 Mbit/s: " << rate / 1e6 << " Mbit/s\n";
  EXPECT_GT(rate, 0.70 * kRate);
  EXPECT_LT(rate, 1.05 * kRate);
  EXPECT_GE(ClassSent(out_of_a, "1:2").first, static_cast<int64_t>(kBytes));
  // About 250 acknowledgements here; fewer where the receiver coalesces more, never none. Each
  // under 128 bytes, with at most its Ethernet header on top.
  const auto [ack_bytes, ack_packets] = ClassSent(out_of_b, "1:1");
  EXPECT_GT(ack_packets, 10);
  EXPECT_LE(ack_bytes, ack_packets * (128 + 14));
  EXPECT_LT(ClassSent(out_of_b, "1:2").first, 64 * 1024);  // b sent no data

  ASSERT_TRUE(net->CutNode(1).ok());
  EXPECT_EQ(ClassSent(out_of_b, "1:1").first, -1);  // blackholed, no classes
  ASSERT_TRUE(net->HealNode(1).ok());
  EXPECT_TRUE(Eventually([&] { return EchoBetween(a, b, "after") == "after"; }));
  EXPECT_GT(ClassSent(out_of_b, "1:1").second, 0);
}

TEST(SandboxNetwork, TwoNetworksGetDifferentNamesAndSubnetsAndStayApart) {
  CREATE_NETWORK_OR_SKIP(one, NetworkOptions{.nodes = 1});
  CREATE_NETWORK_OR_SKIP(two, NetworkOptions{.nodes = 1});
  EXPECT_NE(one->prefix(), two->prefix());
  EXPECT_NE(one->block_cidr(), two->block_cidr());
  ADD_SANDBOX(a1, one, 0, "a");
  ADD_SANDBOX(b1, one, 0, "b");
  ADD_SANDBOX(a2, two, 0, "a");  // the same sandbox name in another network
  EXPECT_NE(a1.netns(), a2.netns());
  // Neither reaches the other's sandboxes, through the host or otherwise.
  absl::StatusOr<Listener> in_a1 = Listen(a1), in_a2 = Listen(a2);
  ASSERT_TRUE(in_a1.ok() && in_a2.ok());
  EXPECT_FALSE(Connect(a1, a2.ip(), in_a2->port, absl::Seconds(1)).ok());
  EXPECT_FALSE(Connect(a2, a1.ip(), in_a1->port, absl::Seconds(1)).ok());
  ::close(in_a1->fd);
  ::close(in_a2->fd);
  const std::string gone = two->prefix();
  two.reset();
  ExpectAllGone(gone);
  EXPECT_EQ(EchoBetween(a1, b1, "still here"), "still here");
}

TEST(SandboxNetwork, DestructionRemovesEverythingItCreated) {
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 2, .uplink_bits_per_second = 10'000'000});
  const std::string prefix = net->prefix();
  ASSERT_TRUE(net->AddSandbox(0, "a").ok());
  ASSERT_TRUE(net->AddSandbox(1, "b").ok());
  ASSERT_TRUE(net->CutNode(1).ok());
  const std::set<std::string> made = ObjectsOf(prefix);
  EXPECT_EQ(made.count("netns:" + prefix + "-0-a"), 1u);
  EXPECT_EQ(made.count("link:" + net->bridge(1)), 1u);
  EXPECT_EQ(made.count("rule:" + net->bridge(1)), 1u);
  EXPECT_EQ(made.count("lock:" + prefix + ".lock"), 1u);
  EXPECT_EQ(made.size(), 2u /*netns*/ + 6u /*links*/ + 2u /*rules*/ + 1u /*lock*/);
  net.reset();
  ExpectAllGone(prefix);
}

// The network's links leave in one kernel call, by their link group; a link of someone else's
// that is in that group too stays where it is, and the network's go by name instead.
TEST(SandboxNetwork, DestructionLeavesAForeignLinkInItsGroupAlone) {
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 2});
  const std::string prefix = net->prefix(), group = absl::StrCat(LinkGroup(prefix));
  ASSERT_TRUE(net->AddSandbox(1, "a").ok());
  absl::StatusOr<nlohmann::json> links = RunToolJson("ip", {"link", "show"});
  ASSERT_THAT(links.status(), IsOk());
  std::set<std::string> grouped;
  for (const auto& link : *links) {
    if (link.value("group", "") == group) grouped.insert(link.value("ifname", ""));
  }
  EXPECT_EQ(grouped, (std::set<std::string>{net->bridge(0), net->bridge(1), prefix + "i0",
                                            prefix + "i1", VethName(prefix, 1, 0)}));
  const std::string foreign = "zz" + prefix;  // not a name of the network's family
  ASSERT_THAT(RunTool("ip", {"link", "add", foreign, "group", group, "type", "bridge"}).status(),
              IsOk());
  absl::Cleanup remove_foreign = [&] { (void)RunTool("ip", {"link", "del", foreign}); };
  net.reset();
  ExpectAllGone(prefix);
  EXPECT_THAT(RunTool("ip", {"link", "show", foreign}).status(), IsOk());
}

TEST(SandboxNetwork, RemovedSandboxLeavesNothingAndItsNameCanBeUsedAgain) {
  CREATE_NETWORK_OR_SKIP(net, NetworkOptions{.nodes = 1});
  ADD_SANDBOX(a, net, 0, "a");
  const std::string netns = a.netns();
  EXPECT_TRUE(absl::IsAlreadyExists(net->AddSandbox(0, "a").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(net->AddSandbox(1, "b").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(net->AddSandbox(0, "Not_A_Name").status()));
  ASSERT_TRUE(net->RemoveSandbox("a").ok());
  EXPECT_EQ(net->sandbox("a"), nullptr);
  EXPECT_EQ(ObjectsOf(netns).size(), 0u);
  std::set<std::string> links = ObjectsOf(net->prefix());
  EXPECT_EQ(links,
            (std::set<std::string>{"link:" + net->bridge(0), "link:" + net->prefix() + "i0",
                                   "rule:" + net->bridge(0), "lock:" + net->prefix() + ".lock"}));
  EXPECT_TRUE(net->AddSandbox(0, "a").ok());
}

}  // namespace
}  // namespace kubetrain::sandbox
