// The server's connection handling: a thread per connection (ThreadPerConnection, httplib's task
// queue) and the registry of accepted sockets (AcceptedSockets) that Server::Stop shuts down.
// Internal to the localkube library (includes httplib).
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

namespace kubetrain::localkube {

// The connections the server has accepted and not yet finished with, so that Stop can shut them
// down: httplib's idle keep-alive connections otherwise sit out their whole keep-alive timeout
// after stop(), and localkube must exit within 2 s of SIGTERM.
//
// httplib (0.11) has no hook that sees an accepted descriptor: the accept loop hands the task
// queue a closure that serves the socket and then closes it, and the socket options callback
// applies to the listener only. So Track, called by the queue on the accepting thread between
// accept and the connection's task, finds the one socket on the server's port that is not tracked
// yet (the accepting thread owns it until the task starts) and keeps a duplicate descriptor of it.
// The duplicate stays open until the task has returned, so the socket's number cannot be reused
// while it is tracked and a shutdown reaches that connection and nothing else; shutting down
// and closing duplicates happen under one mutex.
class AcceptedSockets {
 public:
  explicit AcceptedSockets(int port) : port_(port) {}
  ~AcceptedSockets();

  // Returns the duplicate (to hand to Untrack), or -1 when the socket was not found.
  int Track();
  // After the connection's task has returned (httplib has closed its own descriptor).
  void Untrack(int copy);
  // Shuts down every tracked connection, and any tracked from now on.
  void ShutdownAll();

 private:
  const int port_;
  std::mutex mu_;
  std::map<int, ino_t> tracked_;  // duplicate descriptor -> socket inode
  std::set<ino_t> inodes_;
  bool stopping_ = false;
};

// Runs every connection on its own thread: watches and `logs -f` hold a connection for minutes,
// so a fixed pool (httplib's default is 8 threads) would starve ordinary requests. Threads get a
// large stack: objects may nest 10000 deep (the JSON decoder's limit) and copying, printing and
// merging them recurses once per level, which a default stack does not hold in debug or
// sanitizer builds.
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  explicit ThreadPerConnection(std::shared_ptr<AcceptedSockets> sockets)
      : sockets_(std::move(sockets)) {}

  void enqueue(std::function<void()> fn) override;
  // Shuts every connection down and waits (at most 10 s) for their threads to finish.
  void shutdown() override;

 private:
  static constexpr size_t kStackBytes = 64 << 20;
  struct Task {
    ThreadPerConnection* queue;
    std::function<void()> fn;
    int tracked;  // AcceptedSockets::Track's duplicate
  };
  static void* Run(void* arg);

  std::shared_ptr<AcceptedSockets> sockets_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;
};

}  // namespace kubetrain::localkube
