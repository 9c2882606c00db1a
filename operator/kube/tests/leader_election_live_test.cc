// Leader election against a live localkube when things go wrong around it: a controller that
// takes long to start, and an API server that stops answering the leader mid-term. What is
// asserted is the one thing that matters: never two leaders acting at once.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/loopback.h"
#include "common/testing/status_matchers.h"
#include "operator/kube/config.h"
#include "operator/kube/leader_election.h"
#include "operator/kube/testing/localkube.h"

namespace kubetrain::kube::testing {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;

// A loopback TCP forwarder whose traffic can be frozen: while stalled, bytes stay where they
// are and new connections are accepted but get nothing, as with an overloaded API server or a
// partitioned node. Every wait is bounded by polls of 20 ms.
class StallableProxy {
 public:
  explicit StallableProxy(int upstream_port) : upstream_port_(upstream_port) {
    const ::kubetrain::testing::LoopbackListener listener =
        ::kubetrain::testing::ListenOnLoopback(16);
    listener_ = listener.fd;
    port_ = listener.port;
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~StallableProxy() {
    done_ = true;
    accept_thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : pumps_) t.join();
    close(listener_);
  }
  int port() const { return port_; }
  void Stall(bool stalled) { stalled_ = stalled; }

 private:
  void AcceptLoop() {
    while (!done_) {
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int client = accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      int upstream = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(upstream_port_);
      if (connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        close(client);
        close(upstream);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      pumps_.emplace_back([this, client, upstream] { Pump(client, upstream); });
    }
  }

  void Pump(int a, int b) {
    char buf[16384];
    while (!done_) {
      if (stalled_) {
        absl::SleepFor(absl::Milliseconds(20));  // stalled: nothing passes until Stall(false)
        continue;
      }
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 20) <= 0) continue;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(p[i].fd, buf, sizeof(buf));
        if (n <= 0 || write(p[1 - i].fd, buf, n) != n) closed = true;
      }
      if (closed) break;
    }
    close(a);
    close(b);
  }

  const int upstream_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> done_{false};
  std::atomic<bool> stalled_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;
};

// When each candidate held the lease, by its own account (callbacks in, callbacks out).
struct Term {
  std::atomic<int64_t> started_ns{0};
  std::atomic<int64_t> stopped_ns{0};
  std::atomic<int> lost{0};
};

LeaderCallbacks Track(Term& term, absl::Duration start_takes = absl::ZeroDuration()) {
  LeaderCallbacks c;
  c.on_started_leading = [&term, start_takes](const std::atomic<bool>& stop_leading) {
    term.started_ns = absl::ToUnixNanos(absl::Now());
    absl::Time until = absl::Now() + start_takes;  // e.g. waiting for caches to sync
    while (!stop_leading.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
  };
  c.on_lost_leadership = [&term] { term.lost++; };
  c.on_stopped_leading = [&term] { term.stopped_ns = absl::ToUnixNanos(absl::Now()); };
  return c;
}

LeaderElectionOptions Options(const std::string& identity) {
  return {.namespace_ = "default",
          .name = "kt-le",
          .identity = identity,
          .lease_duration = absl::Seconds(5),
          .renew_deadline = absl::Seconds(2),
          .retry_period = absl::Milliseconds(200)};
}

TEST(LeaderElectionLive, ASlowStartDoesNotStopTheLeaderFromRenewing) {
  auto lk = Localkube::Start();
  ASSERT_TRUE(lk.ok()) << lk.status();
  auto cluster = LoadKubeconfig((*lk)->kubeconfig());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  Term a_term, b_term;
  // a's start takes more than two lease durations, as a controller whose caches sync slowly does.
  LeaderElector a(*cluster, Options("a"), Track(a_term, absl::Seconds(13)));
  LeaderElector b(*cluster, Options("b"), Track(b_term));
  std::atomic<bool> stop_a{false}, stop_b{false};
  absl::Status a_result, b_result;
  std::thread ta([&] { a_result = a.Run(stop_a); });
  ASSERT_TRUE(Eventually([&] { return a.IsLeader(); }, absl::Seconds(5)));
  std::thread tb([&] { b_result = b.Run(stop_b); });
  absl::SleepFor(absl::Seconds(11));  // > 2 lease durations while a's start still runs
  EXPECT_TRUE(a.IsLeader());
  EXPECT_FALSE(b.IsLeader());
  EXPECT_EQ(b_term.started_ns.load(), 0);
  stop_a = true;
  ta.join();
  EXPECT_TRUE(a_result.ok()) << a_result;
  EXPECT_EQ(a_term.lost.load(), 0);
  // a released the lease after its start returned and it stopped: b takes over (its start
  // callback runs just after it becomes the leader).
  ASSERT_TRUE(
      Eventually([&] { return b.IsLeader() && b_term.started_ns.load() != 0; }, absl::Seconds(5)));
  EXPECT_GE(b_term.started_ns.load(), a_term.stopped_ns.load());
  stop_b = true;
  tb.join();
}

TEST(LeaderElectionLive, AStalledLeaderStopsBeforeAnotherTakesOver) {
  auto lk = Localkube::Start();
  ASSERT_TRUE(lk.ok()) << lk.status();
  auto cluster = LoadKubeconfig((*lk)->kubeconfig());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  StallableProxy proxy(cluster->port);
  ClusterConfig through_proxy = *cluster;
  through_proxy.port = proxy.port();
  Term a_term, b_term;
  LeaderElector a(through_proxy, Options("a"), Track(a_term));
  LeaderElector b(*cluster, Options("b"), Track(b_term));
  std::atomic<bool> stop_a{false}, stop_b{false};
  absl::Status a_result;
  std::thread ta([&] { a_result = a.Run(stop_a); });
  ASSERT_TRUE(Eventually([&] { return a.IsLeader(); }, absl::Seconds(5)));
  std::thread tb([&] { EXPECT_THAT(b.Run(stop_b), IsOk()); });
  absl::SleepFor(absl::Seconds(1));  // b tries while a renews
  ASSERT_FALSE(b.IsLeader());
  absl::Time stalled_at = absl::Now();
  proxy.Stall(true);  // a's renewals now hang: its requests must time out, not wait
  // b's start callback runs just after it becomes the leader: wait for both.
  ASSERT_TRUE(
      Eventually([&] { return b.IsLeader() && b_term.started_ns.load() != 0; }, absl::Seconds(15)));
  ta.join();  // a gave up on its own
  EXPECT_EQ(a_result.code(), absl::StatusCode::kUnavailable) << a_result;
  EXPECT_EQ(a_term.lost.load(), 1);
  ASSERT_NE(a_term.stopped_ns.load(), 0);
  // The point of it all: a had stopped acting before b started.
  EXPECT_LT(a_term.stopped_ns.load(), b_term.started_ns.load());
  // ...and within the renew deadline plus one bounded renewal of the stall.
  absl::Duration a_took = absl::FromUnixNanos(a_term.stopped_ns.load()) - stalled_at;
  EXPECT_LE(a_took, absl::Seconds(2) + 2 * LeaderElector::RequestTimeout(Options("a")) +
                        absl::Milliseconds(500));
  stop_b = true;
  tb.join();
  proxy.Stall(false);
}

}  // namespace
}  // namespace kubetrain::kube::testing
