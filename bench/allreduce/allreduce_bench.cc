// allreduce_bench: the worker's CPU all-reduce (GlooCommunicator over TCP) against OpenMPI's
// MPI_Allreduce over TCP, measured in the same run on 127.0.0.1, both as separate processes;
// with --communicator=shm, kubetrain's shared-memory all-reduce against OpenMPI's shared-memory
// transport (the vader BTL) instead.
//
//   build/bin/allreduce_bench [--sizes=1M,4M,16M,64M] [--iters=20] [--warmup=5] [--ranks=2]
//       [--rounds=3] [--mpirun=/usr/bin/mpiexec] [--mpi-bench=PATH] [--timeout=5m]
//       [--communicator=gloo|shm] [--bind-cpus=false]
//
// Gloo side: the driver starts a CoordinatorServer on 127.0.0.1 and re-executes itself once per
// rank (internal --rank/--coordinator flags); each rank joins through a CoordinatorClient and
// makes a GlooCommunicator listening on 127.0.0.1, as a training worker does.
// MPI side: the driver runs the mpi_allreduce reference (built next to this program when CMake
// finds MPI) under `mpirun -np <ranks>` with the ob1 PML and only the tcp and self BTLs on lo,
// IPv4, so that its bytes also go through loopback TCP rather than shared memory or UCX.
//
// Both sides run the same loop per size: fill the buffer with a known pattern, barrier, time one
// in-place float-sum all-reduce, check every element of the result. After `warmup` untimed
// iterations, each of `iters` timed iterations yields the slowest rank's time. Each of `rounds`
// rounds launches both sides once per size, alternating which goes first; the table reports the
// median of all timed iterations of all rounds, and the range of the per-round ratios.
// busbw follows nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n; gloo/mpi is the
// ratio of busbw (so > 1 means Gloo is faster). Timings are reported, never asserted: the CTest
// smoke run only checks that the table is printed (and passes without MPI, where the reference
// is skipped).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/allreduce/pattern.h"
#include "bench/allreduce/processes.h"
#include "bench/allreduce/timed_allreduce.h"
#include "bench/main.h"
#include "bench/sizes.h"
#include "bench/stats.h"
#include "common/flags.h"
#include "common/program.h"
#include "common/status.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/gloo_communicator.h"
#include "worker/collective/shm_communicator.h"

// Where CMake put the reference and the mpirun it found; empty when it found no MPI.
#ifndef KUBETRAIN_MPIRUN
#define KUBETRAIN_MPIRUN ""
#endif
#ifndef KUBETRAIN_MPI_ALLREDUCE
#define KUBETRAIN_MPI_ALLREDUCE ""
#endif

namespace kubetrain {
namespace {

using bench::Errno;
using bench::RunProcesses;
using bench::SelfPath;

struct Options {
  std::string sizes = "1M,4M,16M,64M";
  int iters = 20;
  int warmup = 5;
  int ranks = 2;
  int rounds = 3;
  std::string mpirun = KUBETRAIN_MPIRUN;
  std::string mpi_bench = KUBETRAIN_MPI_ALLREDUCE;
  absl::Duration timeout = absl::Minutes(5);
  // kubetrain's side: "gloo" (TCP, the path between hosts) or "shm" (one shared-memory segment,
  // the path of ranks sharing a host); the MPI reference takes the matching transport.
  std::string communicator = "gloo";
  // Each rank keeps to its own share of the CPUs (worker/collective/cpu_binding.h), and
  // OpenMPI's ranks get mpirun's default binding; false: the kernel places both sides.
  bool bind_cpus = true;
  // Set by the driver on the processes it starts; -1 means "this is the driver".
  int rank = -1;
  std::string coordinator;
};

constexpr double kGoalRatio = 0.9;
constexpr size_t kGoalBytes = size_t{64} << 20;

// ---- Sizes ----

// Buffers up to 16 GiB: "64K", "1M", "4194304", with binary K/M/G suffixes.
absl::StatusOr<std::vector<size_t>> ParseSizes(absl::string_view text) {
  return bench::ParseSizes(text, uint64_t{16} << 30);
}

using bench::SizeName;

// ---- Results ----

struct Timings {
  size_t wrong = 0;
  std::vector<double> seconds;  // slowest rank's time of each timed iteration
};

using Results = std::map<size_t, Timings>;  // by buffer size in bytes

// Parses the "result" lines (pattern.h) out of a side's stdout; other lines are passed on to
// stderr so that launcher warnings stay visible.
absl::StatusOr<Results> ParseResults(absl::string_view out, absl::string_view side) {
  Results results;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
    if (!absl::ConsumePrefix(&line, "result ")) {
      std::fprintf(stderr, "%s: %.*s\n", std::string(side).c_str(), static_cast<int>(line.size()),
                   line.data());
      continue;
    }
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    size_t bytes = 0;
    Timings t;
    bool ok = fields.size() >= 3 && absl::SimpleAtoi(fields[0], &bytes) &&
              absl::SimpleAtoi(fields[1], &t.wrong);
    for (size_t i = 2; ok && i < fields.size(); ++i) {
      double s = 0;
      ok = absl::SimpleAtod(fields[i], &s) && s >= 0;
      t.seconds.push_back(s);
    }
    if (!ok) return absl::InternalError(absl::StrCat(side, ": unreadable result line: ", line));
    results[bytes] = std::move(t);
  }
  return results;
}

// Checks that a side reported every size with correct sums.
absl::Status CheckResults(const Results& results, const std::vector<size_t>& sizes, int iters,
                          absl::string_view side) {
  for (size_t bytes : sizes) {
    auto it = results.find(bytes);
    if (it == results.end() || it->second.seconds.size() != static_cast<size_t>(iters)) {
      return absl::InternalError(absl::StrCat(side, " reported no timings for ", SizeName(bytes)));
    }
    if (it->second.wrong != 0) {
      return absl::DataLossError(absl::StrCat(side, " all-reduce of ", SizeName(bytes), " left ",
                                              it->second.wrong, " wrong elements"));
    }
  }
  return absl::OkStatus();
}

// nccl-tests' bus bandwidth in GB/s (1e9 bytes): comparable across rank counts.
double BusBandwidth(size_t bytes, double seconds, int ranks) {
  if (seconds <= 0) return 0;
  return static_cast<double>(bytes) / seconds * 2.0 * (ranks - 1) / ranks / 1e9;
}

// ---- Gloo side ----

// One Gloo rank: join the coordinator, connect, run every size, and (rank 0) print the results.
absl::Status RunRank(const Options& opt, const std::vector<size_t>& sizes) {
  ASSIGN_OR_RETURN(auto store,
                   worker::CoordinatorClient::Connect({.address = opt.coordinator,
                                                       .rank = opt.rank,
                                                       .world_size = opt.ranks,
                                                       .connect_timeout = absl::Seconds(30)}));
  std::unique_ptr<worker::Communicator> comm;
  if (opt.communicator == "shm") {
    ASSIGN_OR_RETURN(comm,
                     worker::ShmCommunicator::TryCreate(*store, {.rank = opt.rank,
                                                                 .size = opt.ranks,
                                                                 .timeout = opt.timeout,
                                                                 .bind_cpus = opt.bind_cpus}));
    if (comm == nullptr) return absl::FailedPreconditionError("the ranks share no shared memory");
  } else {
    ASSIGN_OR_RETURN(comm, worker::GlooCommunicator::Create(*store, {.rank = opt.rank,
                                                                     .size = opt.ranks,
                                                                     .hostname = "127.0.0.1",
                                                                     .timeout = opt.timeout,
                                                                     .bind_cpus = opt.bind_cpus}));
  }
  RETURN_IF_ERROR(bench::TimeAllReduces(*comm, opt.rank, opt.ranks, sizes, opt.warmup, opt.iters));
  (void)comm->Close();  // every rank ends here: no rank closes under another's last call
  return absl::OkStatus();
}

// What both sides' programs take: sizes as plain byte counts, and the iteration counts.
std::vector<std::string> CommonArgs(const Options& opt, absl::string_view sizes) {
  return {absl::StrCat("--sizes=", sizes), absl::StrCat("--iters=", opt.iters),
          absl::StrCat("--warmup=", opt.warmup)};
}

absl::StatusOr<Results> RunGloo(const Options& opt, const std::vector<size_t>& sizes) {
  ASSIGN_OR_RETURN(auto coordinator, worker::CoordinatorServer::Start({"127.0.0.1:0", opt.ranks}));
  const std::string self = SelfPath();
  if (self.empty()) return Errno("readlink /proc/self/exe");
  std::vector<std::vector<std::string>> argvs;
  for (int rank = 0; rank < opt.ranks; ++rank) {
    std::vector<std::string> argv = {self,
                                     absl::StrCat("--rank=", rank),
                                     absl::StrCat("--ranks=", opt.ranks),
                                     absl::StrCat("--coordinator=127.0.0.1:", coordinator->port()),
                                     absl::StrCat("--timeout=", absl::FormatDuration(opt.timeout)),
                                     absl::StrCat("--communicator=", opt.communicator),
                                     opt.bind_cpus ? "--bind-cpus=true" : "--bind-cpus=false"};
    for (std::string& a : CommonArgs(opt, absl::StrJoin(sizes, ","))) {
      argv.push_back(std::move(a));
    }
    argvs.push_back(std::move(argv));
  }
  ASSIGN_OR_RETURN(std::string out, RunProcesses(argvs, opt.timeout + absl::Seconds(30)));
  ASSIGN_OR_RETURN(Results results, ParseResults(out, "gloo"));
  RETURN_IF_ERROR(CheckResults(results, sizes, opt.iters, "gloo"));
  return results;
}

// ---- MPI side ----

// `sizes` is the --sizes value passed on to the reference (byte counts).
std::vector<std::string> MpiArgv(const Options& opt, absl::string_view sizes) {
  std::vector<std::string> argv = {opt.mpirun, "-np", absl::StrCat(opt.ranks),
                                   // --ranks may exceed the cores.
                                   "--oversubscribe"};
  // kubetrain's ranks keep to CPUs of their own where there are enough, so MPI's ranks get
  // mpirun's own default binding (cores at two ranks; none when oversubscribed); with
  // --bind-cpus=false neither side is bound.
  if (!opt.bind_cpus) {
    for (const char* a : {"--bind-to", "none"}) argv.push_back(a);
  }
  for (const char* a :
       {// The ob1 PML with the tcp BTL (self only for a rank's own share): no UCX and no
        // shared-memory BTL, which would bypass TCP; against kubetrain's shared memory, the
        // shared-memory BTL (vader) instead.
        "--mca", "pml", "ob1", "--mca", "btl",
        opt.communicator == "shm" ? "vader,self" : "tcp,self",
        // Data and launcher traffic on the loopback device, IPv4 only: lo also carries ::1, which
        // is outside 127.0.0.0/8.
        "--mca", "btl_tcp_if_include", "lo", "--mca", "btl_tcp_disable_family", "6", "--mca",
        "oob_tcp_if_include", "lo", "--mca", "oob_tcp_disable_ipv6_family", "1"}) {
    argv.push_back(a);
  }
  // Containers and CI often run as root, which mpirun refuses unless told.
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.push_back(opt.mpi_bench);
  for (std::string& a : CommonArgs(opt, sizes)) argv.push_back(std::move(a));
  return argv;
}

// Why the MPI reference cannot run, or "" when it can.
std::string MpiMissing(const Options& opt) {
  if (std::string_view(KUBETRAIN_MPI_ALLREDUCE).empty() && opt.mpi_bench.empty()) {
    return "not built: CMake found no MPI (install openmpi-bin and libopenmpi-dev, e.g. with "
           "scripts/install-deps, then re-run cmake)";
  }
  if (opt.mpirun.empty()) return "--mpirun is empty";
  if (opt.mpi_bench.empty()) return "--mpi-bench is empty";
  if (::access(opt.mpirun.c_str(), X_OK) != 0) {
    return absl::StrCat(opt.mpirun, " is not executable (install openmpi-bin or pass --mpirun)");
  }
  if (::access(opt.mpi_bench.c_str(), X_OK) != 0) {
    return absl::StrCat(opt.mpi_bench,
                        " is not executable (build mpi_allreduce or pass --mpi-bench)");
  }
  return "";
}

absl::StatusOr<Results> RunMpi(const Options& opt, const std::vector<size_t>& sizes) {
  ASSIGN_OR_RETURN(std::string out, RunProcesses({MpiArgv(opt, absl::StrJoin(sizes, ","))},
                                                 opt.timeout + absl::Seconds(30)));
  ASSIGN_OR_RETURN(Results results, ParseResults(out, "mpirun"));
  RETURN_IF_ERROR(CheckResults(results, sizes, opt.iters, "MPI"));
  return results;
}

// ---- Driver ----

// Both sides' timings pooled over rounds, and each round's ratio, per size.
struct Measured {
  Results gloo;
  Results mpi;  // empty when the reference is skipped
  std::map<size_t, std::vector<double>> round_ratios;
};

void Append(const Results& from, Results* to) {
  for (const auto& [bytes, t] : from) {
    Timings& into = (*to)[bytes];
    into.wrong += t.wrong;
    into.seconds.insert(into.seconds.end(), t.seconds.begin(), t.seconds.end());
  }
}

// Each round measures every size on both sides back to back, one launch per size and side, and
// alternates which side goes first: the machine's load drifts (other builds, other benchmarks),
// and this way a drift hits both sides of a size alike instead of one side's whole run.
absl::StatusOr<Measured> Measure(const Options& opt, const std::vector<size_t>& sizes,
                                 bool with_mpi) {
  Measured m;
  for (int round = 0; round < opt.rounds; ++round) {
    for (size_t bytes : sizes) {
      Results gloo, mpi;
      const bool mpi_first = with_mpi && round % 2 == 1;
      if (mpi_first) {
        ASSIGN_OR_RETURN(mpi, RunMpi(opt, {bytes}));
      }
      ASSIGN_OR_RETURN(gloo, RunGloo(opt, {bytes}));
      if (with_mpi && !mpi_first) {
        ASSIGN_OR_RETURN(mpi, RunMpi(opt, {bytes}));
      }
      if (with_mpi) {
        const double g = bench::Median(gloo.at(bytes).seconds);
        m.round_ratios[bytes].push_back(g > 0 ? bench::Median(mpi.at(bytes).seconds) / g : 0);
      }
      Append(gloo, &m.gloo);
      Append(mpi, &m.mpi);
    }
  }
  return m;
}

void PrintTable(const Options& opt, const std::vector<size_t>& sizes, const Measured& m,
                const std::string& mpi_missing) {
  const bool with_mpi = mpi_missing.empty();
  std::printf(
      "allreduce_bench: %d ranks (processes) per side on 127.0.0.1, in-place float sum; "
      "%d round(s) of %d warm-up + %d timed iterations per size and side\n",
      opt.ranks, opt.rounds, opt.warmup, opt.iters);
  std::printf(
      "time: median over all timed iterations of the slowest rank's time; "
      "busbw = bytes/time * 2(n-1)/n, GB/s = 1e9 B/s\n");
  std::printf("%s: kubetrain %s, rendezvous through CoordinatorServer\n", opt.communicator.c_str(),
              opt.communicator == "shm" ? "ShmCommunicator (one shared-memory segment)"
                                        : "GlooCommunicator over TCP");
  if (with_mpi) {
    std::printf("mpi:  %s\n", absl::StrJoin(MpiArgv(opt, "SIZE"), " ").c_str());
  } else {
    std::printf("mpi:  reference skipped: %s\n", mpi_missing.c_str());
  }
  const std::string& k = opt.communicator;
  std::printf("%10s %10s %12s %10s %12s %10s %14s\n", "size", (k + " ms").c_str(),
              (k + " busbw").c_str(), "mpi ms", "mpi busbw", (k + "/mpi").c_str(),
              "rounds min-max");
  double goal_ratio = -1;
  for (size_t bytes : sizes) {
    const double g = bench::Median(m.gloo.at(bytes).seconds);
    std::printf("%10s %10.3f %12.2f", SizeName(bytes).c_str(), g * 1e3,
                BusBandwidth(bytes, g, opt.ranks));
    if (!with_mpi) {
      std::printf(" %10s %12s %10s %14s\n", "-", "-", "-", "-");
      continue;
    }
    const double t = bench::Median(m.mpi.at(bytes).seconds);
    const double ratio = g > 0 ? t / g : 0;  // of busbw: same bytes and ranks, so times inverted
    const std::vector<double>& rounds = m.round_ratios.at(bytes);
    const auto [lo, hi] = std::minmax_element(rounds.begin(), rounds.end());
    std::printf(" %10.3f %12.2f %10.2f %9.2f-%.2f\n", t * 1e3, BusBandwidth(bytes, t, opt.ranks),
                ratio, *lo, *hi);
    if (bytes == kGoalBytes) goal_ratio = ratio;
  }
  if (goal_ratio >= 0) {
    std::printf("goal ≥ %.1f at 64 MiB: %s (%s/mpi %.2f)\n", kGoalRatio,
                goal_ratio >= kGoalRatio ? "MET" : "MISSED", k.c_str(), goal_ratio);
  } else {
    std::printf("goal ≥ %.1f at 64 MiB: not measured (%s)\n", kGoalRatio,
                with_mpi ? "64M is not in --sizes" : "no MPI reference");
  }
}

absl::Status Run(const Options& opt) {
  if (opt.communicator != "gloo" && opt.communicator != "shm") {
    return absl::InvalidArgumentError(absl::StrCat("--communicator: unsupported value \"",
                                                   opt.communicator, "\"; allowed: gloo, shm"));
  }
  if (opt.iters < 1 || opt.warmup < 0 || opt.ranks < 2 || opt.rounds < 1) {
    return absl::InvalidArgumentError(
        "need --iters >= 1, --warmup >= 0, --ranks >= 2 and --rounds >= 1");
  }
  ASSIGN_OR_RETURN(std::vector<size_t> sizes, ParseSizes(opt.sizes));
  if (opt.rank >= 0) {
    if (opt.rank >= opt.ranks || opt.coordinator.empty()) {
      return absl::InvalidArgumentError("--rank needs --coordinator and a rank below --ranks");
    }
    return RunRank(opt, sizes);
  }
  const std::string mpi_missing = MpiMissing(opt);
  ASSIGN_OR_RETURN(Measured m, Measure(opt, sizes, mpi_missing.empty()));
  PrintTable(opt, sizes, m, mpi_missing);
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  using namespace kubetrain;
  Options opt;
  FlagSet flags("allreduce_bench",
                "Gloo all-reduce (the worker's CPU path) vs OpenMPI MPI_Allreduce, loopback TCP.");
  flags.Add("sizes", &opt.sizes, "buffer sizes, comma-separated, bytes with K/M/G suffixes");
  flags.Add("iters", &opt.iters, "timed iterations per size (the median is reported)");
  flags.Add("warmup", &opt.warmup, "untimed iterations per size before the timed ones");
  flags.Add("ranks", &opt.ranks, "processes on each side");
  flags.Add("rounds", &opt.rounds, "launches of each side per size, alternating which goes first");
  flags.Add("mpirun", &opt.mpirun, "OpenMPI launcher; empty skips the MPI reference");
  flags.Add("mpi-bench", &opt.mpi_bench, "the mpi_allreduce reference program");
  flags.Add("timeout", &opt.timeout, "limit for each side's run (and Gloo's collective timeout)");
  flags.Add("communicator", &opt.communicator,
            "kubetrain's side: gloo (TCP; MPI over its tcp BTL) or shm (shared memory; MPI over "
            "its shared-memory BTL)");
  flags.Add("bind-cpus", &opt.bind_cpus,
            "each side's ranks keep to CPUs of their own where there are as many as ranks "
            "(kubetrain's binding, mpirun's default); false: the kernel places both");
  flags.Add("rank", &opt.rank, "internal: run as this rank (set by the driver)");
  flags.Add("coordinator", &opt.coordinator, "internal: the driver's coordinator (host:port)");
  return bench::RunMain("allreduce_bench", flags, argc, argv, [&]() -> absl::Status {
    absl::Status s = Run(opt);
    if (s.ok() || opt.rank < 0) return s;
    return absl::Status(s.code(), absl::StrCat("rank ", opt.rank, ": ", s.message()));
  });
}
