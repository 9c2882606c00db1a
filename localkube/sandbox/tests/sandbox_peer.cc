// Runs inside sandboxes for the tests (network_test.cc, sweep_test.cc):
//   sandbox_peer echo-server PORT       says "listening", echoes one connection back, exits 0
//   sandbox_peer echo-client IP PORT MESSAGE   prints what the server sent back for MESSAGE
//   sandbox_peer hold FAMILY NODES     creates a sandbox network with one sandbox per node,
//                                      prints "held PREFIX", then waits to be killed
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "localkube/sandbox/network.h"

namespace {

int EchoServer(int port) {
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 1) != 0) {
    std::perror("bind/listen");
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  int peer = ::accept(listener, nullptr, nullptr);
  char buffer[4096];
  for (ssize_t n; (n = ::read(peer, buffer, sizeof(buffer))) > 0;) {
    if (::write(peer, buffer, n) != n) return 1;
  }
  return 0;
}

int EchoClient(const char* ip, int port, const std::string& message) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    std::perror("connect");
    return 1;
  }
  if (::write(fd, message.data(), message.size()) != static_cast<ssize_t>(message.size())) return 1;
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) > 0;) reply.append(buffer, n);
  std::printf("%s\n", reply.c_str());
  return 0;
}

int Hold(const std::string& family, int nodes) {
  auto net = kubetrain::sandbox::Network::Create(
      {.family = family, .nodes = nodes, .uplink_bits_per_second = 10'000'000});
  if (!net.ok()) {
    std::printf("error: %s\n", net.status().ToString().c_str());
    return 1;
  }
  for (int node = 0; node < nodes; ++node) {
    auto s = (*net)->AddSandbox(node, absl::StrCat("held-", node));
    if (!s.ok()) {
      std::printf("error: %s\n", s.status().ToString().c_str());
      return 1;
    }
  }
  std::printf("held %s\n", (*net)->prefix().c_str());
  std::fflush(stdout);
  for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "echo-server" && argc == 3) return EchoServer(std::atoi(argv[2]));
  if (mode == "echo-client" && argc == 5) return EchoClient(argv[2], std::atoi(argv[3]), argv[4]);
  if (mode == "hold" && argc == 4) return Hold(argv[2], std::atoi(argv[3]));
  std::fprintf(stderr,
               "usage: sandbox_peer echo-server PORT | echo-client IP PORT MESSAGE | "
               "hold FAMILY NODES\n");
  return 2;
}
