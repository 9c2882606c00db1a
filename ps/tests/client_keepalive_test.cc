// A ps whose node is lost or cut off answers nothing, not even a reset: the client's keepalive
// fails the calls on that dead connection within seconds (ClientOptions::keepalive_time), where
// they used to sit out their whole deadline. The lost link is a loopback relay that stops
// relaying, as a cut cable does, without closing either socket.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/loopback.h"
#include "ps/client.h"
#include "ps/tests/ps_cluster.h"

namespace kubetrain::ps {
namespace {

// Relays one TCP connection from 127.0.0.1:port() to `target_port` until Cut(), after which it
// moves no byte either way and closes nothing (until destroyed).
class Relay {
 public:
  explicit Relay(int target_port) : target_port_(target_port) {
    const ::kubetrain::testing::LoopbackListener listener =
        ::kubetrain::testing::ListenOnLoopback(4);
    listener_ = listener.fd;
    port_ = listener.port;
    thread_ = std::thread([this] { Run(); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) close(fd);
    close(listener_);
  }
  int port() const { return port_; }
  void Cut() { cut_ = true; }

 private:
  void Run() {
    std::vector<std::pair<int, int>> pairs;  // (from, to), both directions of each connection
    while (!stop_) {
      std::vector<pollfd> polled = {{listener_, POLLIN, 0}};
      if (!cut_) {
        for (auto [from, to] : pairs) polled.push_back({from, POLLIN, 0});
      }
      if (poll(polled.data(), polled.size(), 50) <= 0) continue;
      if (polled[0].revents & POLLIN) {
        int client = accept(listener_, nullptr, nullptr);
        int server = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(target_port_);
        if (client < 0 || connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
          ADD_FAILURE() << "the relay cannot connect";
          return;
        }
        fds_.push_back(client);
        fds_.push_back(server);
        pairs.emplace_back(client, server);
        pairs.emplace_back(server, client);
      }
      for (size_t i = 1; i < polled.size(); ++i) {
        if (!(polled[i].revents & (POLLIN | POLLHUP))) continue;
        char buf[65536];
        ssize_t n = read(polled[i].fd, buf, sizeof(buf));
        if (n <= 0) continue;
        int to = pairs[i - 1].second;
        for (ssize_t off = 0; off < n;) {
          ssize_t w = write(to, buf + off, n - off);
          if (w <= 0) break;
          off += w;
        }
      }
    }
  }

  int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false}, cut_{false};
  std::thread thread_;
};

TEST(PsClientKeepalive, ACallToAPsWhoseLinkIsCutFailsWithinSecondsNotItsDeadline) {
  testing::Cluster cluster(1);
  auto plan = PlacementPlan::Build({{"w", 16}}, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string address = cluster.server(0).address();
  Relay relay(std::stoi(address.substr(address.rfind(':') + 1)));
  auto client = PsClient::Create({absl::StrCat("127.0.0.1:", relay.port())}, *plan,
                                 {.rpc_timeout = absl::Seconds(60),
                                  .pull_timeout = absl::Seconds(60),
                                  .keepalive_time = absl::Seconds(1),
                                  .keepalive_timeout = absl::Seconds(1),
                                  .shared_memory = false});
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Status().ok()) << "through the relay while it relays";

  relay.Cut();
  const absl::Time start = absl::Now();
  auto status = (*client)->Status();
  const absl::Duration took = absl::Now() - start;
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), absl::StatusCode::kUnavailable) << status.status();
  EXPECT_LT(took, absl::Seconds(15)) << "the call sat out its deadline on a dead connection";
}

}  // namespace
}  // namespace kubetrain::ps
