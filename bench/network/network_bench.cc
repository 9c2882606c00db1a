// network_bench: collective communication between emulated nodes with a shaped uplink each, on
// one machine: every rank runs in a network namespace of its own behind a rate-limited link
// (localkube/sandbox/network.h), so the bytes go through real TCP stacks and a real bottleneck.
//
//   build/bin/network_bench [--nodes=2] [--link-gbit=1] [--uplink-queue=fifo|acks-first]
//       [--sizes=16M,64M]
//       [--modes=ring,ps,ps-shards,torch-gloo,mpi|none] [--gradient-compression=none|fp16|bf16]
//       [--ps-pieces=8] [--ps-push-window-mb=16] [--iters=5] [--warmup=1] [--json] [--quick]
//       [--timeout=5m]
//       [--train-model=mlp|cnn|mlp:W1,W2,...
//        [--train-modes=allreduce,allreduce-overlap,ps-sync,ddp] [--train-epochs=3]
//        [--train-examples=0] [--test-examples=0] [--batch-size=64]
//        [--lr=0.04] [--target-accuracy=0.885] [--fusion-mb=4] [--data-dir=...]]
//
// --train-model also trains that model across the same nodes after the exchange cases,
// kubetrain against PyTorch DDP (training.h), and prints a second table.
//
// --quick: two nodes, ring, 1-ps and ps-shards push+pull of 64 MiB, 3 timed iterations (under
// a minute at 1 Gbit/s); --sizes and --link-gbit still apply.
//
// Cases, each against the alpha-beta model's time at the configured rate R (bytes/s):
//   ring       GlooCommunicator's ring all-reduce of M bytes over N ranks, as a training worker
//              makes it (CoordinatorServer here, ranks joining from their sandboxes). Each rank
//              sends 2(N-1)/N·M through its uplink while receiving as much: model 2(N-1)/N·M/R.
//              busbw (nccl-tests) = M/t·2(N-1)/N, the rate each uplink carried.
//   ps         N workers doing sync-mode PsClient::PushAndPull of an M-byte model against one
//              PsServer on a node of its own. The ps's uplink carries N·M in (pushes) and N·M
//              out (pulls). Moved whole (--ps-pieces=1), no pull is answered before the step's
//              last push arrived, so the two directions do not overlap: model 2·N·M/R. In K
//              pieces (ps::ClientOptions::pipeline, the default), a piece's answers leave while
//              later pieces' pushes arrive: model (1 + 1/K)·N·M/R. A worker pushes a piece
//              only while the pieces it still awaits the values of hold at most
//              --ps-push-window-mb (ps::ClientOptions::push_window_bytes; 0: no limit).
//              busbw = the model's bytes over t, so link_utilisation is the model's time over
//              the measured one.
//   ps-shards  the same with one ps task per node beside its worker (k = N), the model placed on
//              them by ps::PlacementPlan as in a job with N ps tasks: M/N through each shard,
//              its own worker's share staying on the node. Each uplink carries (N-1)/N·M each
//              way for the pushes, then again for the pulls: model 2(N-1)/N·M/R, the ring's
//              (the coarse 2·N·M/k per shard, k = N, ignores the node-local share: 2·M/R).
//              busbw as the ring's, the rate each uplink carried.
//   torch-gloo torch.distributed's gloo all-reduce, mpi OpenMPI's MPI_Allreduce, each rank in
//              the same sandbox on the same link as the ring's (peers.h); the ring's model.
//   +fp16/bf16 with --gradient-compression, ring, ps and ps-shards run again right after their
//              float32 rows with 16-bit values on the wire, as training with the flag does (the
//              ring sums in float32 and forwards the owner's rounded bits; the ps widens pushes
//              and codes pulls). The size column stays the float32 model's; model and busbw
//              count the bytes on the wire, half as many; "t/ring" over the float32 ring's time
//              is the ring's speed-up.
// The reference, measured in the same run: one-way raw TCP between two rank sandboxes (node 0
// to node 1, through both uplinks), of the largest size. link_utilisation = busbw / that
// measured rate; "of R" = busbw / the configured rate; "t/ring" = the time over the ring's. The
// header names that connection's TCP congestion control, the host's default, which the sandboxes
// take: how evenly flows sharing an uplink finish depends on it, and so does ps-shards
// (docs/network-benchmark.md).
//
// Why figures pass the model: tc's tbf counts frames (Ethernet and TCP/IP headers included), so
// TCP payload tops out near 1448/1514 = 0.96 of R, which is what the raw TCP row shows; and its
// bucket holds 1 ms at the rate, at least 96 KiB (localkube/sandbox/network.cc), which an idle
// link lets through at once, so a transfer may finish up to ~1 ms before the model says (1 MiB
// at 1 Gbit/s: busbw up to ~1.1 R). The model has no latency term (alpha): the links add none.
//
// Times are the median over the timed iterations of the slowest rank's time. Without root or
// network namespaces (Network::Create's FAILED_PRECONDITION) it says why and exits 77. SIGINT or
// SIGTERM stops it within about a second, killing the children and removing the network.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/network/cases.h"
#include "bench/network/children.h"
#include "bench/network/peers.h"
#include "bench/network/roles.h"
#include "bench/network/training.h"
#include "bench/stats.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/program.h"
#include "common/status.h"
#include "common/stop_signal.h"
#include "worker/core/models.h"

namespace kubetrain::network_bench {
namespace {

constexpr int kExitSkip = 77;
// In the order they run.
constexpr const char* kModes[] = {"ring", "ps", "ps-shards", "torch-gloo", "mpi"};

// The ring's time for `bytes` in `results`, or 0.
double RingSeconds(const std::vector<Result>& results, size_t bytes) {
  for (const Result& r : results) {
    if (r.mode == "ring" && r.bytes == bytes) return r.seconds;  // float32
  }
  return 0;
}

// `tcp`: the raw TCP reference's rate (bytes/s), measured over `raw`.
void Print(const Setup& s, double tcp, const RawTcp& raw, const std::vector<Result>& results) {
  const double gbit = s.opt.link_gbit;
  if (s.opt.json) {
    for (const std::string& note : s.notes)
      std::fprintf(stderr, "network_bench: %s\n", note.c_str());
    for (const Result& r : results) {
      const double ring = RingSeconds(results, r.bytes);
      std::printf(
          "{\"mode\":\"%s\",\"nodes\":%d,\"link_gbit\":%g,\"bytes\":%zu,\"seconds\":%.6f,"
          "\"model_seconds\":%.6f,\"busbw_gbyte_s\":%.6f,\"link_utilisation\":%.4f,"
          "\"link_utilisation_configured\":%.4f,\"raw_tcp_gbyte_s\":%.6f,"
          "\"tcp_congestion_control\":\"%s\",\"uplink_queue\":\"%s\"%s}\n",
          r.mode.c_str(), s.opt.nodes, gbit, r.bytes, r.seconds, r.model_seconds, r.busbw / 1e9,
          r.busbw / tcp, r.busbw / s.rate, tcp / 1e9, raw.congestion_control.c_str(),
          s.opt.uplink_queue.c_str(), JsonRatio("seconds_over_ring", r.seconds, ring).c_str());
    }
    return;
  }
  std::printf(
      "network_bench: %d nodes (ranks), uplink %g Gbit/s each way (%.3f GB/s, queue %s)%s\n",
      s.opt.nodes, gbit, s.rate / 1e9, s.opt.uplink_queue.c_str(),
      s.ps != nullptr ? ", the 1-ps case's ps on a node of its own" : "");
  std::printf(
      "raw TCP node 0 -> node 1: %.3f GB/s = %.2f of the configured rate; TCP congestion control "
      "%s (the host's default)\n",
      tcp / 1e9, tcp / s.rate, raw.congestion_control.c_str());
  for (const std::string& note : s.notes) std::printf("%s\n", note.c_str());
  if (results.empty()) return;  // --modes=none: training only
  std::printf(
      "model: ring, ps-shards and peers 2(N-1)/N*M/R; ps %s; time = median of the slowest rank, "
      "%d timed iterations\n",
      s.opt.ps_pieces > 1 ? "(sync, in K pieces: answers overlap later pushes) (1+1/K)*N*M/R"
                          : "(sync, whole: push then pull) 2*N*M/R",
      s.opt.iters);
  std::printf("%-14s %8s %9s %9s %8s %11s %10s %6s %7s\n", "mode", "size", "time s", "model s",
              "t/model", "busbw GB/s", "of raw TCP", "of R", "t/ring");
  for (const Result& r : results) {
    const double ring = RingSeconds(results, r.bytes);
    std::printf("%-14s %8s %9.3f %9.3f %8.2f %11.3f %10.2f %6.2f %7s\n", r.mode.c_str(),
                SizeName(r.bytes).c_str(), r.seconds, r.model_seconds,
                r.model_seconds > 0 ? r.seconds / r.model_seconds : 0, r.busbw / 1e9, r.busbw / tcp,
                r.busbw / s.rate, Ratio(r.seconds, ring).c_str());
  }
}

absl::Status Drive(const Options& opt, const std::atomic<bool>& stop, bool* skipped) {
  if (opt.nodes < 2 || opt.nodes > 32 || opt.iters < 1 || opt.warmup < 0 || opt.link_gbit <= 0) {
    return absl::InvalidArgumentError(
        "need 2 <= --nodes <= 32, --iters >= 1, --warmup >= 0 and --link-gbit > 0");
  }
  if (opt.ps_pieces < 1 || opt.ps_pieces > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps-pieces=", opt.ps_pieces, ": need 1 to 64 (1: whole, one call a step)"));
  }
  if (opt.ps_push_window_mb < 0 || opt.ps_push_window_mb > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--ps-push-window-mb=", opt.ps_push_window_mb,
                                                   ": need 0 to 4096 (0: no limit)"));
  }
  sandbox::UplinkQueue queue = sandbox::UplinkQueue::kFifo;
  if (opt.uplink_queue == "acks-first") {
    queue = sandbox::UplinkQueue::kAcksFirst;
  } else if (opt.uplink_queue != "fifo") {
    return absl::InvalidArgumentError(
        absl::StrCat("--uplink-queue=", opt.uplink_queue, ": need fifo or acks-first"));
  }
  std::set<std::string> modes, train_modes;
  for (absl::string_view m : absl::StrSplit(opt.modes, ',', absl::SkipWhitespace())) {
    if (m == "none") continue;
    if (std::find(std::begin(kModes), std::end(kModes), m) == std::end(kModes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--modes: unknown \"", m, "\"; none, or one or more of ", absl::StrJoin(kModes, ", ")));
    }
    modes.insert(std::string(m));
  }
  if (!opt.train_model.empty()) {
    // Before any case runs: a misspelt model fails at once, not after the exchanges.
    RETURN_IF_ERROR(worker::CheckModelName(opt.train_model));
    const std::vector<std::string>& known = TrainModes();
    for (absl::string_view m : absl::StrSplit(opt.train_modes, ',', absl::SkipWhitespace())) {
      if (std::find(known.begin(), known.end(), m) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--train-modes: unknown \"", m, "\"; one or more of ", absl::StrJoin(known, ", ")));
      }
      train_modes.insert(std::string(m));
    }
    if (train_modes.empty()) return absl::InvalidArgumentError("--train-modes is empty");
    if (opt.train_epochs < 1 || opt.batch_size < 1 || opt.train_examples < 0 ||
        opt.test_examples < 0 || !(opt.lr > 0) || opt.fusion_mb < 1) {
      return absl::InvalidArgumentError(
          "need --train-epochs >= 1, --batch-size >= 1, --train-examples >= 0, "
          "--test-examples >= 0, --lr > 0 and --fusion-mb >= 1");
    }
  }
  if (modes.empty() && train_modes.empty()) {
    return absl::InvalidArgumentError("--modes is none and no --train-model is given");
  }
  ASSIGN_OR_RETURN(const ps::WireFloat wire, Compression(opt));
  Setup s{.opt = opt, .stop = stop, .deadline = absl::Now() + opt.timeout};
  ASSIGN_OR_RETURN(s.sizes, ParseSizes(opt.sizes));
  s.rate = opt.link_gbit * 1e9 / 8;
  const bool ps = modes.count("ps") > 0;
  auto net =
      sandbox::Network::Create({.family = "nb",
                                .nodes = opt.nodes + (ps ? 1 : 0),
                                .uplink_bits_per_second = static_cast<int64_t>(opt.link_gbit * 1e9),
                                .uplink_queue = queue});
  if (absl::IsFailedPrecondition(net.status())) {
    std::printf("network_bench: skipped: %s\n", std::string(net.status().message()).c_str());
    *skipped = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(net.status());
  s.net = std::move(*net);
  for (int rank = 0; rank < opt.nodes; ++rank) {
    ASSIGN_OR_RETURN(const sandbox::Sandbox* sb,
                     s.net->AddSandbox(rank, absl::StrCat("rank-", rank)));
    s.ranks.push_back(sb);
    if (modes.count("ps-shards") || train_modes.count("ps-sync")) {
      ASSIGN_OR_RETURN(sb, s.net->AddSandbox(rank, absl::StrCat("ps-", rank)));
      s.shards.push_back(sb);
    }
  }
  if (ps) {
    ASSIGN_OR_RETURN(s.ps, s.net->AddSandbox(opt.nodes, "ps"));
  }

  const size_t largest = *std::max_element(s.sizes.begin(), s.sizes.end());
  ASSIGN_OR_RETURN(RawTcp raw,
                   MeasureRawTcp(*s.ranks[0], *s.ranks[1], largest, 3, stop, s.deadline));
  const double tcp = static_cast<double>(largest) / bench::Median(raw.seconds);
  std::fprintf(stderr, "network_bench: raw TCP %s  %.3f GB/s (%.2f of the configured rate)\n",
               SizeName(largest).c_str(), tcp / 1e9, tcp / s.rate);
  std::vector<Result> results;
  for (const char* mode : kModes) {
    if (!modes.count(mode)) continue;
    const std::string m = mode;
    // float32, then (for kubetrain's own exchanges) the compressed wire when asked for.
    std::vector<ps::WireFloat> wires = {ps::WireFloat::kFloat32};
    if (wire != ps::WireFloat::kFloat32 && (m == "ring" || m == "ps" || m == "ps-shards")) {
      wires.push_back(wire);
    }
    for (ps::WireFloat w : wires) {
      absl::StatusOr<std::vector<Result>> more = m == "ring"         ? RunRing(s, w)
                                                 : m == "ps"         ? RunPs(s, false, w)
                                                 : m == "ps-shards"  ? RunPs(s, true, w)
                                                 : m == "torch-gloo" ? RunTorchGloo(s)
                                                                     : RunMpi(s);
      if (!more.ok()) return Annotate(more.status(), ModeName(m, w));
      results.insert(results.end(), more->begin(), more->end());
    }
  }
  std::vector<TrainResult> trained;
  if (!train_modes.empty()) {
    ASSIGN_OR_RETURN(trained, RunTraining(s));
  }
  Print(s, tcp, raw, results);
  if (!train_modes.empty()) PrintTraining(s, trained);
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain::network_bench

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  kubetrain::SetUpLargeMessageAllocator();
  using namespace kubetrain;
  using network_bench::Options;
  // mpirun's launch agent takes ssh's arguments, not flags.
  if (argc >= 2 && std::string_view(argv[1]) == "--role=rsh") {
    return network_bench::RunRsh(std::vector<std::string>(argv + 2, argv + argc));
  }
  Options opt;
  FlagSet flags(
      "network_bench",
      "Ring all-reduce, ps push+pull and peers between emulated nodes with shaped uplinks.");
  flags.Add("nodes", &opt.nodes, "ranks, each on an emulated node of its own");
  flags.Add("link-gbit", &opt.link_gbit, "each node's uplink rate, Gbit/s each way");
  flags.Add("uplink-queue", &opt.uplink_queue,
            "fifo (one queue) or acks-first (TCP segments under 128 bytes ahead of the bulk, as "
            "a node's fq_codel serves a flow that only acknowledges)");
  flags.Add("sizes", &opt.sizes, "message/model sizes, bytes with K/M/G suffixes (16M,64M)");
  flags.Add("modes", &opt.modes, "ring, ps, ps-shards, torch-gloo, mpi (comma-separated), or none");
  flags.Add("gradient-compression", &opt.compression,
            "fp16 or bf16: ring, ps and ps-shards also with 16-bit values on the wire (none)");
  flags.Add("ps-pieces", &opt.ps_pieces,
            "ps, ps-shards: at most this many pieces per ps task and step (1: whole)");
  flags.Add("ps-push-window-mb", &opt.ps_push_window_mb,
            "ps, ps-shards: MiB of pieces a worker awaits the values of before it holds back the "
            "next (0: no limit)");
  flags.Add("iters", &opt.iters, "timed iterations per case (the median is reported)");
  flags.Add("warmup", &opt.warmup, "untimed iterations per case before the timed ones");
  flags.Add("quick", &opt.quick, "2 nodes, ring, ps and ps-shards at 64 MiB, 3 iterations");
  flags.Add("json", &opt.json, "one JSON object per result instead of the table");
  flags.Add("timeout", &opt.timeout, "limit for the whole run");
  flags.Add("train-model", &opt.train_model,
            "also train this kubetrain-worker --model (mlp, cnn, mlp:W1,W2,...) across the "
            "nodes, kubetrain against PyTorch DDP");
  flags.Add("train-modes", &opt.train_modes, "allreduce, allreduce-overlap, ps-sync, ddp");
  flags.Add("train-epochs", &opt.train_epochs, "epochs of each training run");
  flags.Add("train-examples", &opt.train_examples,
            "train on the first this many examples (0: all 60,000)");
  flags.Add("test-examples", &opt.test_examples,
            "evaluate on the first this many test examples (0: all 10,000)");
  flags.Add("batch-size", &opt.batch_size, "training examples per step per worker");
  flags.Add("lr", &opt.lr, "learning rate for a global batch of 128, scaled linearly");
  flags.Add("target-accuracy", &opt.target_accuracy, "training: time to this test accuracy");
  flags.Add("fusion-mb", &opt.fusion_mb, "allreduce-overlap: --fusion-threshold-mb");
  flags.Add("data-dir", &opt.data_dir, "Fashion-MNIST IDX files (.gz)");
  flags.Add("role", &opt.role, "internal: run as a child (set by the driver)");
  flags.Add("rank", &opt.rank, "internal: the child's rank");
  flags.Add("coordinator", &opt.coordinator, "internal: the driver's coordinator (host:port)");
  flags.Add("host", &opt.host, "internal: the child sandbox's IP");
  flags.Add("ps", &opt.ps, "internal: the ps tasks' addresses");
  flags.Add("shard", &opt.shard, "internal: the ps task's index");
  flags.Add("shards", &opt.shards, "internal: the number of ps tasks");
  auto args = flags.Parse(argc, argv);
  if (!args.ok()) return UsageExit("network_bench", args.status());
  log::SetLevel(log::Level::kWarn);
  if (opt.quick) {
    opt.nodes = 2;
    opt.iters = 3;
    opt.modes = "ring,ps,ps-shards";
    if (opt.sizes.empty()) opt.sizes = "64M";
  }
  if (opt.sizes.empty()) opt.sizes = "16M,64M";
  if (!opt.role.empty()) {
    if (const char* secret = std::getenv(network_bench::kSecretEnv)) opt.secret = secret;
    absl::Status s = network_bench::RunRole(opt);
    if (s.ok()) return 0;
    std::fprintf(stderr, "network_bench %s %d: %s\n", opt.role.c_str(), opt.rank,
                 s.ToString().c_str());
    return 1;
  }
  // The sandboxes are removed on the way out of Drive; what a stop past the grace leaves, the
  // next run sweeps (localkube/sandbox/sweep.h).
  static std::atomic<bool> stop{false};
  InstallStopSignals(&stop, absl::Milliseconds(1500));
  bool skipped = false;
  absl::Status s = network_bench::Drive(opt, stop, &skipped);
  if (skipped) return network_bench::kExitSkip;
  if (s.ok()) return 0;
  std::fprintf(stderr, "network_bench: %s\n", s.ToString().c_str());
  return stop.load() ? 128 + StopSignal() : 1;
}
