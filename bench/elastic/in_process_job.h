// A ps-sync job in this process, as the elastic benches run it: one ps on 127.0.0.1 (port 0)
// and one training thread per worker rank on the Fashion-MNIST MLP.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "ps/server.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/runtime/metrics.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::bench {

class InProcessJob {
 public:
  // Borrows `data`, which must outlive the job.
  static absl::StatusOr<std::unique_ptr<InProcessJob>> Start(const worker::FashionMnist& data) {
    ps::ServerOptions options;
    options.address = "127.0.0.1:0";
    ASSIGN_OR_RETURN(std::unique_ptr<ps::PsServer> server, ps::PsServer::Start(options, nullptr));
    return std::unique_ptr<InProcessJob>(new InProcessJob(data, std::move(server)));
  }

  // ps-sync without progress lines or periodic checkpoints, which would be timed too.
  static worker::TrainerOptions QuietOptions(int epochs, int batch_size) {
    worker::TrainerOptions options;
    options.mode = worker::Mode::kPsSync;
    options.epochs = epochs;
    options.batch_size = batch_size;
    options.log_every = absl::Hours(1);
    options.checkpoint_every = absl::Hours(1);
    return options;
  }

  ~InProcessJob() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }

  // Starts rank `rank` (0 is the chief) with a TF_CONFIG that counts `size` training workers:
  // the job's size when its pod would have been created. `metrics` may be null.
  void Launch(int rank, int size, const worker::TrainerOptions& options,
              worker::WorkerMetrics* metrics = nullptr) {
    absl::StatusOr<worker::TrainingSummary>& result =
        results_.emplace(rank, absl::UnknownError("not run")).first->second;
    threads_.emplace_back([this, rank, size, options, metrics, &result] {
      worker::CpuDevice device;
      worker::TaskIdentity id{rank == 0 ? worker::Role::kChief : worker::Role::kWorker,
                              rank,
                              size,
                              {server_->address()}};
      worker::Trainer trainer(options, id, device, &data_.train, &data_.test, metrics);
      result = trainer.Run(stop_);
    });
  }

  // Waits for every rank: the first failure, else the chief's summary.
  absl::StatusOr<worker::TrainingSummary> Wait() {
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    for (const auto& [rank, result] : results_) RETURN_IF_ERROR(result.status());
    return results_.at(0);
  }

  // Stops every rank (a bench that gave up).
  void Stop() { stop_ = true; }
  ps::PsServer& ps() { return *server_; }

 private:
  InProcessJob(const worker::FashionMnist& data, std::unique_ptr<ps::PsServer> server)
      : data_(data), server_(std::move(server)) {}

  const worker::FashionMnist& data_;
  std::unique_ptr<ps::PsServer> server_;
  std::atomic<bool> stop_{false};
  std::map<int, absl::StatusOr<worker::TrainingSummary>> results_;  // by rank
  std::vector<std::thread> threads_;
};

}  // namespace kubetrain::bench
