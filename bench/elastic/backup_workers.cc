// Backup workers against a slow worker, in one process: parameter-server synchronous training
// (ps-sync) of the Fashion-MNIST MLP by N worker threads and one ps on 127.0.0.1, timed per
// global step in three configurations, interleaved round by round:
//   healthy       every worker at full speed (the reference);
//   slow, b=0     one worker slowed to about 3x the healthy step time (--inject-delay of twice
//                 the healthy step), every step waiting for all N gradients;
//   slow, b=1     the same slow worker, each step applying the first N-1 gradients
//                 (--backup-workers=1, TensorFlow's SyncReplicasOptimizer backup workers).
// It prints each configuration's step time (min/median/max over the rounds) as a ratio to the
// healthy median of the same run, against its goals (b=1 within 1.15x of healthy; b=0 at least
// 2x, which is what backup workers are for), with the final accuracy and the share of the slow
// worker's pushes dropped as stale.
//   backup_workers [--workers=4] [--rounds=3] [--epochs=1] [--data-dir=DIR]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/elastic/in_process_job.h"
#include "bench/main.h"
#include "bench/stats.h"
#include "common/flags.h"
#include "common/program.h"
#include "common/status.h"
#include "prometheus/registry.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/runtime/metrics.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::bench {
namespace {

using worker::TrainerOptions;

struct Options {
  int workers = 4;
  int rounds = 3;
  int epochs = 1;
  std::string data_dir = std::string(worker::kDefaultFashionMnistDir);
};

struct RunResult {
  double step_ms = 0;      // wall time of the run per global step
  int64_t steps = 0;       // global steps
  double accuracy = 0;     // the chief's final test accuracy
  double slow_pushes = 0;  // the slow worker's steps, and how many of its pushes were stale
  double slow_stale = 0;
};

// One ps-sync run: `workers` threads, the last one `delay` slower per step.
absl::StatusOr<RunResult> Train(const Options& o, const worker::FashionMnist& data,
                                absl::Duration delay, int backup_workers) {
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessJob> job, InProcessJob::Start(data));
  TrainerOptions options = InProcessJob::QuietOptions(o.epochs, 64);
  options.backup_workers = backup_workers;
  TrainerOptions slow = options;
  slow.inject_delay = delay;
  prometheus::Registry registry;
  worker::WorkerMetrics slow_metrics(registry, {"bench", "worker", "slow"});
  const absl::Time start = absl::Now();
  for (int rank = 0; rank < o.workers; ++rank) {
    const bool is_slow = rank == o.workers - 1;
    job->Launch(rank, o.workers, is_slow ? slow : options, is_slow ? &slow_metrics : nullptr);
  }
  ASSIGN_OR_RETURN(worker::TrainingSummary chief, job->Wait());
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  RunResult out;
  out.steps = chief.steps;
  out.step_ms = out.steps > 0 ? wall * 1000 / static_cast<double>(out.steps) : 0;
  out.accuracy = chief.test_accuracy;
  out.slow_pushes = slow_metrics.steps.Value();
  out.slow_stale = slow_metrics.stale_pushes.Value();
  return out;
}

struct Series {
  std::string name;
  int backup_workers;
  bool slow;
  std::vector<double> step_ms;
  std::vector<double> accuracy;
  double slow_pushes = 0, slow_stale = 0;
};

absl::Status Run(const Options& o) {
  if (o.workers < 2) return absl::InvalidArgumentError("--workers: must be >= 2");
  if (o.rounds < 1) return absl::InvalidArgumentError("--rounds: must be >= 1");
  worker::SetBlasThreads(1);  // the workers share the cores, as tasks on one node do
  ASSIGN_OR_RETURN(worker::FashionMnist data, worker::LoadFashionMnist(o.data_dir));
  // The slow worker's delay: twice a healthy step, measured first, so that it runs at ~3x.
  ASSIGN_OR_RETURN(RunResult warm, Train(o, data, absl::ZeroDuration(), 0));
  const absl::Duration delay = absl::Microseconds(static_cast<int64_t>(warm.step_ms * 2000));
  std::vector<Series> series = {{"healthy", 0, false, {}, {}},
                                {"slow worker, b=0", 0, true, {}, {}},
                                {"slow worker, b=1", 1, true, {}, {}}};
  for (int round = 0; round < o.rounds; ++round) {
    for (Series& s : series) {
      ASSIGN_OR_RETURN(RunResult r,
                       Train(o, data, s.slow ? delay : absl::ZeroDuration(), s.backup_workers));
      s.step_ms.push_back(r.step_ms);
      s.accuracy.push_back(r.accuracy);
      s.slow_pushes += r.slow_pushes;
      s.slow_stale += r.slow_stale;
      std::fprintf(stderr, "round %d/%d %-18s %7.2f ms/step, accuracy %.4f, %lld steps\n",
                   round + 1, o.rounds, s.name.c_str(), r.step_ms, r.accuracy,
                   static_cast<long long>(r.steps));
    }
  }
  const double healthy = Median(series[0].step_ms);
  std::printf(
      "backup_workers: %d ps-sync workers + 1 ps (Fashion-MNIST MLP, batch 64, %d epoch(s)); "
      "one worker slowed by %.1f ms per step (2x a healthy step); %d interleaved round(s)\n\n",
      o.workers, o.epochs, absl::ToDoubleMilliseconds(delay), o.rounds);
  std::printf("%-18s %26s %10s %10s %18s  %s\n", "configuration", "ms/step min/median/max",
              "x healthy", "accuracy", "slow pushes stale", "goal");
  for (const Series& s : series) {
    const double median = Median(s.step_ms);
    const double ratio = healthy > 0 ? median / healthy : 0;
    std::string goal;
    if (s.slow && s.backup_workers == 0) {
      goal = absl::StrFormat(">= 2.00 (%s)", ratio >= 2.0 ? "MET" : "MISSED");
    } else if (s.slow) {
      goal = absl::StrFormat("<= 1.15 (%s)", ratio <= 1.15 ? "MET" : "MISSED");
    }
    std::string stale =
        s.slow ? absl::StrFormat("%.0f/%.0f (%.0f%%)", s.slow_stale, s.slow_pushes,
                                 s.slow_pushes > 0 ? 100 * s.slow_stale / s.slow_pushes : 0)
               : "-";
    std::printf("%-18s %8.2f/%7.2f/%7.2f %10.2f %10.4f %18s  %s\n", s.name.c_str(),
                Percentile(s.step_ms, 0), median, Percentile(s.step_ms, 1), ratio,
                Median(s.accuracy), stale.c_str(), goal.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain::bench

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  using namespace kubetrain;
  bench::Options o;
  FlagSet flags("backup_workers",
                "ps-sync step time with a slow worker, without and with a backup worker, against "
                "all healthy workers.");
  flags.Add("workers", &o.workers, "training workers (one of them slowed)");
  flags.Add("rounds", &o.rounds, "interleaved rounds (each runs the three configurations)");
  flags.Add("epochs", &o.epochs, "epochs per run");
  flags.Add("data-dir", &o.data_dir, "Fashion-MNIST IDX files (.gz)", "KUBETRAIN_DATA_DIR");
  return bench::RunMain("backup_workers", flags, argc, argv, [&] { return bench::Run(o); });
}
