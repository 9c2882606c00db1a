// A rate-limited work queue of keys, as controllers use it (client-go's workqueue semantics):
//   - a key waiting in the queue is held once however often it is added (dedup);
//   - a key being processed is never handed to a second worker; adding it meanwhile marks it
//     dirty and it is queued again when the first worker calls Done;
//   - AddAfter is a real delayed add: a timer thread moves the key in when its time comes, so
//     deadlines and TTLs fire without any other event;
//   - AddLater queues a key behind every key added otherwise (a second, lower lane), for work
//     that should yield: a finished job's cleanup after the outcomes of other jobs;
//   - AddRateLimited delays by the larger of a per-key exponential backoff (5 ms → 1000 s) and a
//     global token bucket (10 qps, burst 100); Forget resets the key's backoff.
// Thread-safe. Owns its timer thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/kube/rate_limiter.h"

namespace kubetrain::kube {

struct WorkQueueOptions {
  absl::Duration base_delay = absl::Milliseconds(5);
  absl::Duration max_delay = absl::Seconds(1000);
  double qps = 10;
  int burst = 100;
  const Clock* clock = nullptr;  // when delayed keys are due; null: the real clock
};

class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions options = {});
  ~WorkQueue();

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  // Queues `key` in the lower lane: Get hands it out only when no other key is ready. A key
  // already waiting stays where it is; a key being processed goes to the lower lane at Done, and
  // an Add while it waits there does not move it up.
  void AddLater(const std::string& key);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;

  // Blocks for the next key; nullopt once shut down.
  std::optional<std::string> Get();
  // Marks `key` processed: it may be handed out again.
  void Done(const std::string& key);

  // The clock jumped (a FakeClock's Advance): the timer looks at the delayed keys again.
  void Wake();

  // Wakes every Get with nullopt and stops the timer. Keys still queued are dropped.
  void ShutDown();
  bool shutting_down() const;
  // Keys ready to be handed out, both lanes (not counting delayed or in-process ones).
  size_t Len() const;
  // Keys waiting for their delay.
  size_t Delayed() const;

 private:
  void AddLocked(const std::string& key);
  void TimerLoop();

  const WorkQueueOptions options_;
  const Clock& clock_;
  TokenBucket bucket_;
  mutable std::mutex mu_;
  std::condition_variable ready_cv_;
  std::condition_variable timer_cv_;
  std::deque<std::string> queue_;
  std::deque<std::string> later_;        // the lower lane (AddLater)
  std::set<std::string> later_at_done_;  // being processed; to the lower lane at Done
  std::set<std::string> dirty_;          // queued, or to be queued when processing ends
  std::set<std::string> processing_;
  std::multimap<absl::Time, std::string> delayed_;
  std::map<std::string, int> failures_;
  bool shutting_down_ = false;
  std::thread timer_;
};

}  // namespace kubetrain::kube
