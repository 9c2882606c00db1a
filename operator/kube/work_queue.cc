#include "operator/kube/work_queue.h"

#include <algorithm>
#include <cmath>

#include "absl/time/clock.h"

namespace kubetrain::kube {

WorkQueue::WorkQueue(WorkQueueOptions options)
    : options_(options),
      clock_(options.clock != nullptr ? *options.clock : Clock::Real()),
      bucket_(options.qps, options.burst) {
  timer_ = std::thread([this] { TimerLoop(); });
}

WorkQueue::~WorkQueue() {
  ShutDown();
  if (timer_.joinable()) timer_.join();
}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_ || !dirty_.insert(key).second) return;
  if (processing_.count(key)) return;  // queued again by Done
  queue_.push_back(key);
  ready_cv_.notify_one();
}

void WorkQueue::Add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  if (delay <= absl::ZeroDuration()) return Add(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  delayed_.emplace(clock_.Now() + delay, key);
  timer_cv_.notify_one();
}

void WorkQueue::AddLater(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  if (processing_.count(key)) {
    dirty_.insert(key);
    later_at_done_.insert(key);
    return;
  }
  if (!dirty_.insert(key).second) return;  // already waiting, in either lane
  later_.push_back(key);
  ready_cv_.notify_one();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  absl::Duration per_key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int failures = failures_[key]++;
    double factor = std::pow(2.0, std::min(failures, 40));
    per_key = std::min(options_.base_delay * factor, options_.max_delay);
  }
  AddAfter(key, std::max(per_key, bucket_.Reserve()));
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock<std::mutex> lock(mu_);
  ready_cv_.wait(lock, [this] { return shutting_down_ || !queue_.empty() || !later_.empty(); });
  if (shutting_down_) return std::nullopt;
  std::deque<std::string>& lane = queue_.empty() ? later_ : queue_;
  std::string key = std::move(lane.front());
  lane.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  bool later = later_at_done_.erase(key) > 0;
  if (dirty_.count(key) && !shutting_down_) {
    (later ? later_ : queue_).push_back(key);
    ready_cv_.notify_one();
  }
}

void WorkQueue::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  timer_cv_.notify_all();
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  ready_cv_.notify_all();
  timer_cv_.notify_all();
}

bool WorkQueue::shutting_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + later_.size();
}

size_t WorkQueue::Delayed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return delayed_.size();
}

void WorkQueue::TimerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    absl::Time now = clock_.Now();
    while (!delayed_.empty() && delayed_.begin()->first <= now) {
      std::string key = delayed_.begin()->second;
      delayed_.erase(delayed_.begin());
      AddLocked(key);
    }
    if (delayed_.empty()) {
      timer_cv_.wait(lock);
    } else {
      timer_cv_.wait_for(lock, absl::ToChronoNanoseconds(delayed_.begin()->first - now));
    }
  }
}

}  // namespace kubetrain::kube
