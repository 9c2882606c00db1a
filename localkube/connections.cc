// Connection handling for the server: AcceptedSockets (finding, tracking and shutting down the
// accepted sockets) and ThreadPerConnection (a detached, large-stack thread per connection).
#include "localkube/connections.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace kubetrain::localkube {
namespace {

// Whether `fd` is a connected TCP socket whose local port is `port`: one the server on `port`
// accepted (a client's socket to that port has an ephemeral local port; the listener has no
// peer). getsockname and getpeername only read the socket.
bool AcceptedOn(int fd, int port) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  int local_port = 0;
  if (local.ss_family == AF_INET) {
    local_port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  } else if (local.ss_family == AF_INET6) {
    local_port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  }
  if (local_port != port) return false;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0;
}

// The inode of the socket /proc/self/fd/NAME links to ("socket:[INODE]"); 0 for anything else.
// Reading the link does not touch the descriptor, which another thread may be closing.
ino_t SocketInode(const std::filesystem::path& link) {
  std::error_code ec;
  std::string link_target = std::filesystem::read_symlink(link, ec).string();
  absl::string_view target = link_target;
  if (ec || !absl::ConsumePrefix(&target, "socket:[") || !absl::ConsumeSuffix(&target, "]")) {
    return 0;
  }
  uint64_t inode = 0;
  return absl::SimpleAtoi(target, &inode) ? static_cast<ino_t>(inode) : 0;
}

}  // namespace

AcceptedSockets::~AcceptedSockets() {
  for (const auto& [fd, inode] : tracked_) close(fd);
}

int AcceptedSockets::Track() {
  std::lock_guard<std::mutex> lock(mu_);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
    ino_t inode = SocketInode(entry.path());
    if (inode == 0 || inodes_.contains(inode) || !AcceptedOn(fd, port_)) continue;
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) continue;
    struct stat st;
    if (fstat(copy, &st) != 0 || st.st_ino != inode || !AcceptedOn(copy, port_)) {
      close(copy);  // the number was closed and reused since it was read
      continue;
    }
    tracked_.emplace(copy, inode);
    inodes_.insert(inode);
    if (stopping_) ::shutdown(copy, SHUT_RDWR);
    return copy;
  }
  return -1;
}

void AcceptedSockets::Untrack(int copy) {
  if (copy < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tracked_.find(copy);
  if (it == tracked_.end()) return;
  inodes_.erase(it->second);
  tracked_.erase(it);
  close(copy);
}

void AcceptedSockets::ShutdownAll() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  for (const auto& [fd, inode] : tracked_) ::shutdown(fd, SHUT_RDWR);
}

void ThreadPerConnection::enqueue(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++active_;
  }
  auto* task = new Task{this, std::move(fn), sockets_->Track()};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kStackBytes);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  if (pthread_create(&thread, &attr, &Run, task) != 0) Run(task);  // serve it inline
  pthread_attr_destroy(&attr);
}

void ThreadPerConnection::shutdown() {
  sockets_->ShutdownAll();
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait_for(lock, std::chrono::seconds(10), [&] { return active_ == 0; });
}

void* ThreadPerConnection::Run(void* arg) {
  std::unique_ptr<Task> task(static_cast<Task*>(arg));
  task->fn();  // serves the connection, then closes it
  ThreadPerConnection* queue = task->queue;
  queue->sockets_->Untrack(task->tracked);
  task.reset();
  std::lock_guard<std::mutex> l(queue->mu_);
  if (--queue->active_ == 0) queue->idle_.notify_all();
  return nullptr;
}

}  // namespace kubetrain::localkube
