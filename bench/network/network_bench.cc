// network_bench: collective communication between emulated nodes with a shaped uplink each, on
// one machine: every rank runs in a network namespace of its own behind a rate-limited link
// (localkube/sandbox/network.h), so the bytes go through real TCP stacks and a real bottleneck.
//
//   build/bin/network_bench [--nodes=2] [--link-gbit=1] [--sizes=16M,64M] [--modes=ring,ps]
//       [--iters=5] [--warmup=1] [--json] [--quick] [--timeout=5m]
//
// --quick: two nodes at 1 Gbit/s, ring and 1-ps push+pull of 64 MiB, 3 timed iterations (under
// a minute); --sizes and --link-gbit still apply.
//
// Cases, each against the alpha-beta model's time at the configured rate R (bytes/s):
//   ring  GlooCommunicator's ring all-reduce of M bytes over N ranks, as a training worker
//         makes it (CoordinatorServer here, ranks joining from their sandboxes). Each rank
//         sends 2(N-1)/N·M through its uplink while receiving as much: model 2(N-1)/N·M/R.
//         busbw (nccl-tests) = M/t·2(N-1)/N, the rate each uplink carried.
//   ps    N workers doing sync-mode PsClient::PushAndPull of an M-byte model against one
//         PsServer on a node of its own. The ps's uplink carries N·M in (pushes) and N·M out
//         (pulls). In sync mode no pull is answered before the step's last push arrived, so the
//         two directions do not overlap: model 2·N·M/R. busbw = 2·N·M/t, the rate at which the
//         ps's uplink carried the step's bytes.
// The reference, measured in the same run: one-way raw TCP between two rank sandboxes (node 0
// to node 1, through both uplinks), of the largest size. link_utilisation = busbw / that
// measured rate; "of R" = busbw / the configured rate.
//
// Why figures pass the model: tc's tbf counts frames (Ethernet and TCP/IP headers included), so
// TCP payload tops out near 1448/1514 = 0.96 of R, which is what the raw TCP row shows; and its
// bucket holds 10 ms at the rate (localkube/sandbox/network.cc), which an idle link lets
// through at once, so a transfer may finish up to ~10 ms before the model says (small sizes,
// high rates: busbw above R). The model has no latency term (alpha): the links add none.
//
// Times are the median over the timed iterations of the slowest rank's time. Without root or
// network namespaces (Network::Create's FAILED_PRECONDITION) it says why and exits 77. SIGINT or
// SIGTERM stops it within about a second, killing the children and removing the network.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/allreduce/processes.h"
#include "bench/network/children.h"
#include "bench/network/roles.h"
#include "bench/stats.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/stop_signal.h"
#include "worker/collective/coordinator.h"

namespace kubetrain::network_bench {
namespace {

constexpr int kExitSkip = 77;

struct Result {
  std::string mode;
  size_t bytes = 0;
  double seconds = 0;        // median of the slowest rank's time
  double model_seconds = 0;  // the alpha-beta model's time at the configured rate
  double busbw = 0;          // bytes/s
};

struct Setup {
  const Options& opt;
  std::vector<size_t> sizes;
  double rate = 0;  // configured, bytes/s
  std::unique_ptr<sandbox::Network> net;
  std::vector<const sandbox::Sandbox*> ranks;
  const sandbox::Sandbox* ps = nullptr;
  const std::atomic<bool>& stop;
  absl::Time deadline;
};

// Times per size from "result" lines (bench/allreduce/pattern.h); for several processes, the
// slowest of each iteration.
absl::StatusOr<std::map<size_t, std::vector<double>>> Parse(const std::vector<std::string>& outputs,
                                                            int iters) {
  std::map<size_t, std::vector<double>> times;
  for (const std::string& out : outputs) {
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipWhitespace())) {
      if (!absl::ConsumePrefix(&line, "result ")) continue;
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      size_t bytes = 0, wrong = 0;
      bool ok = f.size() == static_cast<size_t>(iters) + 2 && absl::SimpleAtoi(f[0], &bytes) &&
                absl::SimpleAtoi(f[1], &wrong);
      if (ok && wrong != 0) {
        return absl::DataLossError(
            absl::StrCat("all-reduce of ", SizeName(bytes), " left ", wrong, " wrong elements"));
      }
      std::vector<double>& t = times[bytes];
      t.resize(static_cast<size_t>(iters), 0.0);
      for (int i = 0; ok && i < iters; ++i) {
        double s = 0;
        ok = absl::SimpleAtod(f[i + 2], &s);
        t[i] = std::max(t[i], s);
      }
      if (!ok) return absl::InternalError(absl::StrCat("unreadable result line: ", line));
    }
  }
  return times;
}

std::vector<std::string> ChildArgs(const Options& opt, absl::string_view role, int rank,
                                   absl::string_view host, absl::string_view sizes) {
  return {bench::SelfPath(),
          absl::StrCat("--role=", role),
          absl::StrCat("--rank=", rank),
          absl::StrCat("--nodes=", opt.nodes),
          absl::StrCat("--host=", host),
          absl::StrCat("--sizes=", sizes),
          absl::StrCat("--iters=", opt.iters),
          absl::StrCat("--warmup=", opt.warmup),
          absl::StrCat("--timeout=", absl::FormatDuration(opt.timeout))};
}

void Progress(const Result& r) {
  std::fprintf(stderr, "network_bench: %-4s %8s  %.3f s (model %.3f s)  busbw %.3f GB/s\n",
               r.mode.c_str(), SizeName(r.bytes).c_str(), r.seconds, r.model_seconds,
               r.busbw / 1e9);
}

absl::StatusOr<std::vector<Result>> RunRing(Setup& s) {
  const int n = s.opt.nodes;
  // On the host, reached by each rank through its own node's gateway.
  // Only this run's ranks may join: the host's coordinator is reachable from every node.
  std::random_device random;
  const std::string secret =
      absl::StrFormat("%08x%08x%08x%08x", random(), random(), random(), random());
  ASSIGN_OR_RETURN(auto coordinator, worker::CoordinatorServer::Start({"0.0.0.0:0", n, secret}));
  Children children(s.stop, s.deadline);
  std::vector<int> ids;
  for (int rank = 0; rank < n; ++rank) {
    std::vector<std::string> argv =
        ChildArgs(s.opt, "ring-rank", rank, s.ranks[rank]->ip(), absl::StrJoin(s.sizes, ","));
    argv.push_back(
        absl::StrCat("--coordinator=", s.net->node_gateway(rank), ":", coordinator->port()));
    ASSIGN_OR_RETURN(int id,
                     children.Start(*s.ranks[rank], std::move(argv), {{kSecretEnv, secret}}));
    ids.push_back(id);
  }
  RETURN_IF_ERROR(children.WaitExit(ids));
  ASSIGN_OR_RETURN(auto times, Parse({children.output(ids[0])}, s.opt.iters));
  std::vector<Result> results;
  for (size_t bytes : s.sizes) {
    if (!times.count(bytes)) return absl::InternalError("ring: rank 0 reported no times");
    Result r{"ring", bytes, bench::Median(times[bytes])};
    const double per_rank = 2.0 * (n - 1) / n * static_cast<double>(bytes);
    r.model_seconds = per_rank / s.rate;
    r.busbw = r.seconds > 0 ? per_rank / r.seconds : 0;
    Progress(r);
    results.push_back(r);
  }
  return results;
}

absl::StatusOr<std::vector<Result>> RunPs(Setup& s) {
  const int n = s.opt.nodes;
  std::vector<Result> results;
  for (size_t bytes : s.sizes) {
    Children children(s.stop, s.deadline);
    ASSIGN_OR_RETURN(
        int ps, children.Start(*s.ps, ChildArgs(s.opt, "ps", 0, s.ps->ip(), absl::StrCat(bytes))));
    RETURN_IF_ERROR(children.WaitOutput(ps, "\n"));
    const std::string& said = children.output(ps);
    if (!absl::StartsWith(said, "ready ")) {
      return absl::InternalError(absl::StrCat("the ps said: ", said));
    }
    const std::string address = said.substr(6, said.find('\n') - 6);
    std::vector<int> ids;
    for (int rank = 0; rank < n; ++rank) {
      std::vector<std::string> argv =
          ChildArgs(s.opt, "ps-worker", rank, s.ranks[rank]->ip(), absl::StrCat(bytes));
      argv.push_back(absl::StrCat("--ps=", address));
      ASSIGN_OR_RETURN(int id, children.Start(*s.ranks[rank], std::move(argv)));
      ids.push_back(id);
    }
    RETURN_IF_ERROR(children.WaitExit(ids));
    std::vector<std::string> outputs;
    for (int id : ids) outputs.push_back(children.output(id));
    ASSIGN_OR_RETURN(auto times, Parse(outputs, s.opt.iters));
    if (!times.count(bytes)) return absl::InternalError("ps: the workers reported no times");
    Result r{"ps", bytes, bench::Median(times[bytes])};
    const double through_ps = 2.0 * n * static_cast<double>(bytes);
    r.model_seconds = through_ps / s.rate;
    r.busbw = r.seconds > 0 ? through_ps / r.seconds : 0;
    Progress(r);
    results.push_back(r);
  }
  return results;
}

void Print(const Setup& s, double tcp, const std::vector<Result>& results) {
  const double gbit = s.opt.link_gbit;
  if (s.opt.json) {
    for (const Result& r : results) {
      std::printf(
          "{\"mode\":\"%s\",\"nodes\":%d,\"link_gbit\":%g,\"bytes\":%zu,\"seconds\":%.6f,"
          "\"model_seconds\":%.6f,\"busbw_gbyte_s\":%.6f,\"link_utilisation\":%.4f,"
          "\"link_utilisation_configured\":%.4f,\"raw_tcp_gbyte_s\":%.6f}\n",
          r.mode.c_str(), s.opt.nodes, gbit, r.bytes, r.seconds, r.model_seconds, r.busbw / 1e9,
          r.busbw / tcp, r.busbw / s.rate, tcp / 1e9);
    }
    return;
  }
  std::printf("network_bench: %d nodes (ranks), uplink %g Gbit/s each way (%.3f GB/s)%s\n",
              s.opt.nodes, gbit, s.rate / 1e9,
              s.ps != nullptr ? ", the ps on a node of its own" : "");
  std::printf("raw TCP node 0 -> node 1: %.3f GB/s = %.2f of the configured rate\n", tcp / 1e9,
              tcp / s.rate);
  std::printf(
      "model: ring 2(N-1)/N*M/R; ps (sync: push then pull) 2*N*M/R; time = median of the "
      "slowest rank, %d timed iterations\n",
      s.opt.iters);
  std::printf("%-5s %10s %10s %10s %8s %12s %10s %8s\n", "mode", "size", "time s", "model s",
              "t/model", "busbw GB/s", "of raw TCP", "of R");
  for (const Result& r : results) {
    std::printf("%-5s %10s %10.3f %10.3f %8.2f %12.3f %10.2f %8.2f\n", r.mode.c_str(),
                SizeName(r.bytes).c_str(), r.seconds, r.model_seconds,
                r.model_seconds > 0 ? r.seconds / r.model_seconds : 0, r.busbw / 1e9, r.busbw / tcp,
                r.busbw / s.rate);
  }
}

absl::Status Drive(const Options& opt, const std::atomic<bool>& stop, bool* skipped) {
  if (opt.nodes < 2 || opt.iters < 1 || opt.warmup < 0 || opt.link_gbit <= 0) {
    return absl::InvalidArgumentError(
        "need --nodes >= 2, --iters >= 1, --warmup >= 0 and --link-gbit > 0");
  }
  const bool ring = absl::StrContains(opt.modes, "ring"), ps = absl::StrContains(opt.modes, "ps");
  for (absl::string_view m : absl::StrSplit(opt.modes, ',', absl::SkipWhitespace())) {
    if (m != "ring" && m != "ps") {
      return absl::InvalidArgumentError(
          absl::StrCat("--modes: unknown \"", m, "\"; ring, ps or both"));
    }
  }
  Setup s{.opt = opt, .stop = stop, .deadline = absl::Now() + opt.timeout};
  ASSIGN_OR_RETURN(s.sizes, ParseSizes(opt.sizes));
  s.rate = opt.link_gbit * 1e9 / 8;
  auto net = sandbox::Network::Create(
      {.family = "nb",
       .nodes = opt.nodes + (ps ? 1 : 0),
       .uplink_bits_per_second = static_cast<int64_t>(opt.link_gbit * 1e9)});
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
  }
  if (ps) {
    ASSIGN_OR_RETURN(s.ps, s.net->AddSandbox(opt.nodes, "ps"));
  }

  const size_t largest = *std::max_element(s.sizes.begin(), s.sizes.end());
  ASSIGN_OR_RETURN(std::vector<double> tcp_s,
                   MeasureRawTcp(*s.ranks[0], *s.ranks[1], largest, 3, stop, s.deadline));
  const double tcp = static_cast<double>(largest) / bench::Median(tcp_s);
  std::fprintf(stderr, "network_bench: raw TCP %s  %.3f GB/s (%.2f of the configured rate)\n",
               SizeName(largest).c_str(), tcp / 1e9, tcp / s.rate);
  std::vector<Result> results;
  if (ring) {
    ASSIGN_OR_RETURN(results, RunRing(s));
  }
  if (ps) {
    ASSIGN_OR_RETURN(std::vector<Result> more, RunPs(s));
    results.insert(results.end(), more.begin(), more.end());
  }
  Print(s, tcp, results);
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain::network_bench

int main(int argc, char** argv) {
  using namespace kubetrain;
  using network_bench::Options;
  Options opt;
  FlagSet flags("network_bench",
                "Ring all-reduce and 1-ps push+pull between emulated nodes with shaped uplinks.");
  flags.Add("nodes", &opt.nodes, "ranks, each on an emulated node of its own");
  flags.Add("link-gbit", &opt.link_gbit, "each node's uplink rate, Gbit/s each way");
  flags.Add("sizes", &opt.sizes, "message/model sizes, bytes with K/M/G suffixes (16M,64M)");
  flags.Add("modes", &opt.modes, "ring, ps or both (comma-separated)");
  flags.Add("iters", &opt.iters, "timed iterations per case (the median is reported)");
  flags.Add("warmup", &opt.warmup, "untimed iterations per case before the timed ones");
  flags.Add("quick", &opt.quick, "2 nodes, ring and ps at 64 MiB, 3 iterations");
  flags.Add("json", &opt.json, "one JSON object per result instead of the table");
  flags.Add("timeout", &opt.timeout, "limit for the whole run");
  flags.Add("role", &opt.role, "internal: run as a child (set by the driver)");
  flags.Add("rank", &opt.rank, "internal: the child's rank");
  flags.Add("coordinator", &opt.coordinator, "internal: the driver's coordinator (host:port)");
  flags.Add("host", &opt.host, "internal: the child sandbox's IP");
  flags.Add("ps", &opt.ps, "internal: the ps's address");
  auto args = flags.Parse(argc, argv);
  if (!args.ok()) return UsageExit("network_bench", args.status());
  log::SetLevel(log::Level::kWarn);
  if (opt.quick) {
    opt.nodes = 2;
    opt.iters = 3;
    opt.modes = "ring,ps";
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
