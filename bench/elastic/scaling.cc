// An elastic job that grows while it trains, in one process: parameter-server synchronous
// training (ps-sync) of the Fashion-MNIST MLP by worker threads and one ps on 127.0.0.1, in three
// runs of the same examples (--epochs over the training set):
//   fixed, N        --workers-before workers, a job of fixed size (the accuracy reference);
//   fixed, M        --workers-after workers, fixed (the throughput a job of that size reaches);
//   elastic N -> M  --elastic, starting with N workers; once --change-at of the run's gradients
//                   are in, M - N more workers start and join (kubectl scale, in a cluster).
// Each worker's step carries --step-delay-ms of sleep, standing in for the device time of a
// worker on its own GPU or node: without it, workers sharing this machine's cores would measure
// the cores, not the membership. It prints examples/s before and after the change (from the ps's
// count of gradients applied, sampled every 100 ms), how long after the change the rate first
// rose by a quarter, and the final accuracies, against the goals: the rate up within 10 s of
// the change, and accuracy within 0.5 points of the fixed-size run of the same examples.
//   scaling [--workers-before=2] [--workers-after=4] [--epochs=3] [--step-delay-ms=20]
//           [--change-at=0.3] [--data-dir=DIR]
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/elastic/in_process_job.h"
#include "bench/main.h"
#include "common/flags.h"
#include "common/program.h"
#include "common/status.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::bench {
namespace {

using worker::TrainerOptions;

constexpr int kBatch = 64;

struct Options {
  int workers_before = 2;
  int workers_after = 4;
  int epochs = 3;
  int step_delay_ms = 20;
  double change_at = 0.3;
  std::string data_dir = std::string(worker::kDefaultFashionMnistDir);
};

// (seconds since the start, gradients applied) every 100 ms.
using Samples = std::vector<std::pair<double, int64_t>>;

struct RunResult {
  double accuracy = 0;
  double wall = 0;
  double examples_per_second = 0;  // the whole run
  int64_t steps = 0;
  double change = -1;  // elastic: seconds from the start when the new workers started
  Samples samples;
};

// Examples per second over [from, to] seconds, from the samples.
double RateBetween(const Samples& s, double from, double to) {
  const std::pair<double, int64_t>* first = nullptr;
  const std::pair<double, int64_t>* last = nullptr;
  for (const auto& sample : s) {
    if (sample.first < from || sample.first > to) continue;
    if (first == nullptr) first = &sample;
    last = &sample;
  }
  if (first == nullptr || last == first || last->first <= first->first) return 0;
  return static_cast<double>(last->second - first->second) * kBatch / (last->first - first->first);
}

// One run: `initial` workers at the start; with `elastic`, `later` more once `change_at` of the
// run's gradients are in.
absl::StatusOr<RunResult> Train(const Options& o, const worker::FashionMnist& data, int initial,
                                bool elastic, int later) {
  ASSIGN_OR_RETURN(std::unique_ptr<InProcessJob> job, InProcessJob::Start(data));
  TrainerOptions options = InProcessJob::QuietOptions(o.epochs, kBatch);
  options.elastic = elastic;
  options.inject_delay = absl::Milliseconds(o.step_delay_ms);
  const int total = initial + later;
  const absl::Time start = absl::Now();
  for (int rank = 0; rank < initial; ++rank) job->Launch(rank, initial, options);
  RunResult out;
  const int64_t run_gradients = int64_t{o.epochs} * (data.train.size() / kBatch);
  const int64_t change_after = static_cast<int64_t>(o.change_at * run_gradients);
  // Sampled until the chief is done; bounded by the slowest run this bench can make.
  const absl::Time give_up = start + absl::Minutes(30);
  while (absl::Now() < give_up) {
    const ps::StoreStatus status = job->ps().store().Status();
    const double t = absl::ToDoubleSeconds(absl::Now() - start);
    out.samples.emplace_back(t, status.gradients_applied);
    if (elastic && out.change < 0 && status.gradients_applied >= change_after) {
      out.change = t;
      for (int rank = initial; rank < total; ++rank) job->Launch(rank, total, options);
    }
    if (status.closed || job->ps().service().shutdown_requested()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (absl::Now() >= give_up) job->Stop();
  absl::StatusOr<worker::TrainingSummary> chief = job->Wait();
  out.wall = absl::ToDoubleSeconds(absl::Now() - start);
  RETURN_IF_ERROR(chief.status());
  out.accuracy = chief->test_accuracy;
  out.steps = chief->steps;
  out.examples_per_second = static_cast<double>(job->ps().store().Status().gradients_applied) *
                            kBatch / (out.wall > 0 ? out.wall : 1);
  return out;
}

absl::Status Run(const Options& o) {
  if (o.workers_before < 1) return absl::InvalidArgumentError("--workers-before: must be >= 1");
  if (o.workers_after <= o.workers_before) {
    return absl::InvalidArgumentError("--workers-after: must be more than --workers-before");
  }
  if (o.epochs < 1) return absl::InvalidArgumentError("--epochs: must be >= 1");
  if (o.step_delay_ms < 0) return absl::InvalidArgumentError("--step-delay-ms: must be >= 0");
  if (!(o.change_at > 0 && o.change_at < 0.9)) {
    return absl::InvalidArgumentError("--change-at: must be in (0, 0.9)");
  }
  worker::SetBlasThreads(1);  // the workers share the cores, as tasks on one node do
  ASSIGN_OR_RETURN(worker::FashionMnist data, worker::LoadFashionMnist(o.data_dir));
  const int n = o.workers_before, m = o.workers_after;
  ASSIGN_OR_RETURN(RunResult fixed_n, Train(o, data, n, /*elastic=*/false, 0));
  std::fprintf(stderr, "fixed, %d: %.1f s, accuracy %.4f\n", n, fixed_n.wall, fixed_n.accuracy);
  ASSIGN_OR_RETURN(RunResult fixed_m, Train(o, data, m, /*elastic=*/false, 0));
  std::fprintf(stderr, "fixed, %d: %.1f s, accuracy %.4f\n", m, fixed_m.wall, fixed_m.accuracy);
  ASSIGN_OR_RETURN(RunResult grown, Train(o, data, n, /*elastic=*/true, m - n));
  std::fprintf(stderr, "elastic %d -> %d: %.1f s, accuracy %.4f, change at %.1f s\n", n, m,
               grown.wall, grown.accuracy, grown.change);
  if (grown.change < 0) return absl::InternalError("the elastic run ended before the change");

  // The rate before: from 1 s after the start (set-up done) to the change. After: the first
  // 1-s window, starting at the change, whose rate is a quarter above it; and the rate over
  // [change + 2 s, change + 10 s].
  const double before = RateBetween(grown.samples, std::min(1.0, grown.change / 2), grown.change);
  double raised_after = -1;
  for (const auto& [t, applied] : grown.samples) {
    if (t < grown.change || t + 1 > grown.wall) continue;
    if (RateBetween(grown.samples, t, t + 1) >= 1.25 * before) {
      raised_after = t + 1 - grown.change;
      break;
    }
  }
  const double after = RateBetween(grown.samples, grown.change + 2, grown.change + 10);
  const double fixed_n_rate = RateBetween(fixed_n.samples, 1, fixed_n.wall);
  const double fixed_m_rate = RateBetween(fixed_m.samples, 1, fixed_m.wall);
  const double accuracy_gap = 100 * (grown.accuracy - fixed_n.accuracy);

  std::printf(
      "scaling: ps-sync, 1 ps, Fashion-MNIST MLP, batch %d per worker, %d epoch(s) per run, "
      "%d ms of stand-in device time per step; elastic run grows %d -> %d workers once %.0f%% "
      "of its gradients are in\n\n",
      kBatch, o.epochs, o.step_delay_ms, n, m, 100 * o.change_at);
  std::printf("%-20s %10s %12s %12s %10s\n", "run", "wall s", "examples/s", "global steps",
              "accuracy");
  auto row = [](const std::string& name, const RunResult& r, double rate) {
    std::printf("%-20s %10.1f %12.0f %12lld %10.4f\n", name.c_str(), r.wall, rate,
                static_cast<long long>(r.steps), r.accuracy);
  };
  row(absl::StrFormat("fixed, %d workers", n), fixed_n, fixed_n_rate);
  row(absl::StrFormat("fixed, %d workers", m), fixed_m, fixed_m_rate);
  row(absl::StrFormat("elastic, %d -> %d", n, m), grown, grown.examples_per_second);
  std::printf("\nelastic, before the change: %.0f examples/s (%.2f x fixed %d)\n", before,
              fixed_n_rate > 0 ? before / fixed_n_rate : 0, n);
  std::printf("elastic, 2-10 s after it:   %.0f examples/s (%.2f x before, %.2f x fixed %d)\n",
              after, before > 0 ? after / before : 0, fixed_m_rate > 0 ? after / fixed_m_rate : 0,
              m);
  const bool raised = raised_after >= 0 && raised_after <= 10;
  if (raised_after >= 0) {
    std::printf("rate up by 25%%: %.1f s after the change   goal <= 10 s (%s)\n", raised_after,
                raised ? "MET" : "MISSED");
  } else {
    std::printf("rate up by 25%%: never                     goal <= 10 s (MISSED)\n");
  }
  std::printf("accuracy, elastic - fixed %d: %+.2f points   goal within 0.5 (%s)\n", n,
              accuracy_gap, std::abs(accuracy_gap) <= 0.5 ? "MET" : "MISSED");
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain::bench

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  using namespace kubetrain;
  bench::Options o;
  FlagSet flags("scaling",
                "An elastic ps-sync job grown mid-run, against fixed-size jobs of the same "
                "examples: examples/s before and after, and final accuracy.");
  flags.Add("workers-before", &o.workers_before, "workers the elastic run starts with");
  flags.Add("workers-after", &o.workers_after, "workers once it has grown");
  flags.Add("epochs", &o.epochs, "epochs per run");
  flags.Add("step-delay-ms", &o.step_delay_ms,
            "sleep per step, standing in for a worker's own device time");
  flags.Add("change-at", &o.change_at, "share of the run's gradients after which it grows");
  flags.Add("data-dir", &o.data_dir, "Fashion-MNIST IDX files (.gz)", "KUBETRAIN_DATA_DIR");
  return bench::RunMain("scaling", flags, argc, argv, [&] { return bench::Run(o); });
}
