// Training progress read from the chief's Prometheus endpoint (kubetrain_worker_* gauges), for
// status.progress and the STEP / ACCURACY columns of `kubectl get tj`.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "operator/api/types.h"

namespace kubetrain::controller {

// Parses Prometheus text exposition: global step, epoch, loss, accuracy, examples/s.
// NOT_FOUND when the text has no kubetrain_worker_global_step sample.
absl::StatusOr<api::Progress> ParseProgress(absl::string_view metrics_text);

// The final figures from the chief's summary line, {"event":"training_complete","steps":...},
// found anywhere in `text` (a termination message or the end of a log). NOT_FOUND without one.
absl::StatusOr<api::Progress> ParseFinalSummary(absl::string_view text);

// GET http://<ip>:<port>/metrics with a short timeout.
absl::StatusOr<api::Progress> FetchProgress(const std::string& ip, int port,
                                            absl::Duration timeout);

// Reads running chiefs' progress on threads of its own, never on a reconcile worker
// (docs/architecture.md §10): a chief that is slow or unreachable (a NetworkPolicy between the
// operator and port 8080) costs a poller thread its timeout, and no job's reconcile waits for it.
// It says when a job's progress is worth a status write, which is all the reconciler needs to
// know; each job's status is then written at most every `min_write_interval`, or at once when the
// epoch changes. Thread-safe.
class ProgressPoller {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(5);  // between two reads of one chief
    absl::Duration timeout = absl::Seconds(2);   // one read
    absl::Duration min_write_interval = absl::Seconds(30);
    int threads = 2;
  };
  // `worth_writing(key)` is called (on a poller thread) when job `key` has progress that
  // WorthWriting would accept.
  ProgressPoller(Options options, std::function<void(const std::string& key)> worth_writing);
  ~ProgressPoller();

  void Start();
  void Stop();

  // Polls the chief of job `key` at host:port from now on (a new address replaces the old one).
  void Track(const std::string& key, const std::string& host, int port);
  // Stops polling it and forgets what was read.
  void Untrack(const std::string& key);
  // The latest progress read for job `key`, if any.
  std::optional<api::Progress> Latest(const std::string& key) const;
  // Whether `latest` should replace `written` (what status holds, written at `written_at`): a
  // new epoch at once, any other change once `min_write_interval` has passed.
  bool WorthWriting(const std::optional<api::Progress>& written, absl::Time written_at,
                    const api::Progress& latest, absl::Time now) const;
  const Options& options() const { return options_; }

 private:
  struct Target {
    std::string host;
    int port = 0;
    uint64_t generation = 0;  // bumped by Track with a new address: a read in flight is stale
    absl::Time due;
    bool busy = false;
    std::optional<api::Progress> latest;
    std::optional<api::Progress> announced;  // what worth_writing was last called for
    absl::Time announced_at = absl::InfinitePast();
  };
  void Loop();

  const Options options_;
  const std::function<void(const std::string&)> worth_writing_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::map<std::string, Target> targets_;
  uint64_t generations_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kubetrain::controller
