// Test support: a TCP socket listening on 127.0.0.1 at a port the kernel picks, for tests that
// stand in for a peer (one that never answers, a relay, a proxy).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace kubetrain::testing {

struct LoopbackListener {
  int fd = -1;
  int port = 0;
};

// A listening socket (close-on-exec) with `backlog`; a failed step fails the test.
inline LoopbackListener ListenOnLoopback(int backlog) {
  LoopbackListener l;
  l.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(l.fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(l.fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  EXPECT_EQ(listen(l.fd, backlog), 0);
  EXPECT_EQ(getsockname(l.fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  l.port = ntohs(addr.sin_port);
  return l;
}

// A listener that never accepts: the kernel completes the TCP handshake from its backlog and no
// byte is ever answered, as from a peer behind a policy that drops the replies, or one too busy
// to serve. A gRPC or HTTP call to it hangs until its deadline.
class SilentListener {
 public:
  SilentListener() : listener_(ListenOnLoopback(64)) {}
  ~SilentListener() { close(listener_.fd); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;

  int port() const { return listener_.port; }
  std::string address() const { return "127.0.0.1:" + std::to_string(listener_.port); }

 private:
  LoopbackListener listener_;
};

}  // namespace kubetrain::testing
