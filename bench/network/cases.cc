// network_bench's own cases (cases.h).
#include "bench/network/cases.h"

#include <cstdio>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/allreduce/processes.h"
#include "bench/network/children.h"
#include "bench/stats.h"
#include "common/status.h"
#include "worker/collective/coordinator.h"

namespace kubetrain::network_bench {
namespace {

std::vector<std::string> ChildArgs(const Options& opt, absl::string_view role, int rank,
                                   absl::string_view host, absl::string_view sizes,
                                   ps::WireFloat wire = ps::WireFloat::kFloat32) {
  return {bench::SelfPath(),
          absl::StrCat("--gradient-compression=", ps::WireFloatName(wire)),
          absl::StrCat("--role=", role),
          absl::StrCat("--rank=", rank),
          absl::StrCat("--nodes=", opt.nodes),
          absl::StrCat("--host=", host),
          absl::StrCat("--sizes=", sizes),
          absl::StrCat("--iters=", opt.iters),
          absl::StrCat("--warmup=", opt.warmup),
          absl::StrCat("--ps-pieces=", opt.ps_pieces),
          absl::StrCat("--ps-push-window-mb=", opt.ps_push_window_mb),
          absl::StrCat("--timeout=", absl::FormatDuration(opt.timeout))};
}

// The bytes a float32 model of `bytes` takes on `wire`.
double WireBytes(size_t bytes, ps::WireFloat wire) {
  return static_cast<double>(bytes / sizeof(float) * ps::WireFloatBytes(wire));
}

}  // namespace

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

std::string Ratio(double value, double over) {
  return over > 0 ? absl::StrFormat("%.2f", value / over) : "-";
}

std::string JsonRatio(absl::string_view field, double value, double over) {
  return over > 0 ? absl::StrFormat(",\"%s\":%.4f", field, value / over) : "";
}

void Progress(const Result& r) {
  std::fprintf(stderr, "network_bench: %-14s %8s  %.3f s (model %.3f s)  busbw %.3f GB/s\n",
               r.mode.c_str(), SizeName(r.bytes).c_str(), r.seconds, r.model_seconds,
               r.busbw / 1e9);
}

std::string ModeName(absl::string_view mode, ps::WireFloat wire) {
  if (wire == ps::WireFloat::kFloat32) return std::string(mode);
  return absl::StrCat(mode, "+", ps::WireFloatName(wire));
}

Result AllReduceRow(const Setup& s, absl::string_view mode, size_t bytes,
                    const std::vector<double>& times, ps::WireFloat wire) {
  const int n = s.opt.nodes;
  Result r{ModeName(mode, wire), bytes, bench::Median(times)};
  const double on_wire = WireBytes(bytes, wire);
  const double per_rank = 2.0 * (n - 1) / n * on_wire;
  r.model_seconds = per_rank / s.rate;
  r.busbw = r.seconds > 0 ? per_rank / r.seconds : 0;
  Progress(r);
  return r;
}

absl::StatusOr<std::vector<Result>> AllReduceRows(
    const Setup& s, absl::string_view mode, const std::map<size_t, std::vector<double>>& times,
    ps::WireFloat wire) {
  std::vector<Result> results;
  for (size_t bytes : s.sizes) {
    auto it = times.find(bytes);
    if (it == times.end()) {
      return absl::InternalError(absl::StrCat(mode, ": no times for ", SizeName(bytes)));
    }
    results.push_back(AllReduceRow(s, mode, bytes, it->second, wire));
  }
  return results;
}

absl::StatusOr<std::vector<Result>> RunRing(Setup& s, ps::WireFloat wire) {
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
        ChildArgs(s.opt, "ring-rank", rank, s.ranks[rank]->ip(), absl::StrJoin(s.sizes, ","), wire);
    argv.push_back(
        absl::StrCat("--coordinator=", s.net->node_gateway(rank), ":", coordinator->port()));
    ASSIGN_OR_RETURN(int id,
                     children.Start(*s.ranks[rank], std::move(argv), {{kSecretEnv, secret}}));
    ids.push_back(id);
  }
  RETURN_IF_ERROR(children.WaitExit(ids));
  ASSIGN_OR_RETURN(auto times, Parse({children.output(ids[0])}, s.opt.iters));
  return AllReduceRows(s, "ring", times, wire);
}

// ps: the server's uplink carries N*M in (the pushes) and N*M out (the pulls); in sync mode no
// pull is answered before the step's last push arrived, so the two do not overlap: 2*N*M/R.
// ps-shards: shard r holds M/N and sits beside worker r, whose share of it stays on the node's
// bridge. Each uplink carries (N-1)/N*M out (its worker's pushes to the other shards) while it
// carries as much in (the other workers' pushes to its shard), then the same for the pulls:
// 2(N-1)/N*M/R, the ring's time, and busbw counts the same bytes per uplink.
absl::StatusOr<std::vector<Result>> RunPs(Setup& s, bool sharded, ps::WireFloat wire) {
  const int n = s.opt.nodes;
  const std::vector<const sandbox::Sandbox*> servers =
      sharded ? s.shards : std::vector<const sandbox::Sandbox*>{s.ps};
  const int k = static_cast<int>(servers.size());
  std::vector<Result> results;
  for (size_t bytes : s.sizes) {
    Children children(s.stop, s.deadline);
    std::vector<int> ps_ids;
    for (int shard = 0; shard < k; ++shard) {
      std::vector<std::string> argv =
          ChildArgs(s.opt, "ps", shard, servers[shard]->ip(), absl::StrCat(bytes));
      argv.push_back(absl::StrCat("--shard=", shard));
      argv.push_back(absl::StrCat("--shards=", k));
      ASSIGN_OR_RETURN(int id, children.Start(*servers[shard], std::move(argv)));
      ps_ids.push_back(id);
    }
    std::vector<std::string> addresses;
    for (int id : ps_ids) {
      RETURN_IF_ERROR(children.WaitOutput(id, "\n"));
      const std::string& said = children.output(id);
      if (!absl::StartsWith(said, "ready ")) {
        return absl::InternalError(absl::StrCat("the ps said: ", said));
      }
      addresses.push_back(said.substr(6, said.find('\n') - 6));
    }
    std::vector<int> ids;
    for (int rank = 0; rank < n; ++rank) {
      std::vector<std::string> argv =
          ChildArgs(s.opt, "ps-worker", rank, s.ranks[rank]->ip(), absl::StrCat(bytes), wire);
      argv.push_back(absl::StrCat("--ps=", absl::StrJoin(addresses, ",")));
      ASSIGN_OR_RETURN(int id, children.Start(*s.ranks[rank], std::move(argv)));
      ids.push_back(id);
    }
    RETURN_IF_ERROR(children.WaitExit(ids));
    std::vector<std::string> outputs;
    for (int id : ids) outputs.push_back(children.output(id));
    ASSIGN_OR_RETURN(auto times, Parse(outputs, s.opt.iters));
    if (!times.count(bytes)) return absl::InternalError("ps: the workers reported no times");
    if (sharded) {
      results.push_back(AllReduceRow(s, "ps-shards", bytes, times[bytes], wire));
      continue;
    }
    Result r{ModeName("ps", wire), bytes, bench::Median(times[bytes])};
    // Whole, the ps's uplink carries N·M in, then N·M out: 2·N·M/R. In K pieces, a piece's
    // answers leave while the next pieces' pushes arrive: N·M/R for the pushes, plus the last
    // piece's answers, N·M/(K·R). busbw is the model's bytes over the time, so link_utilisation
    // is the model's time over the measured one.
    const double on_wire = WireBytes(bytes, wire);
    const int pieces = PsPieces(s.opt, bytes, 1);
    const double through_ps = pieces > 1 ? (1.0 + 1.0 / pieces) * n * on_wire : 2.0 * n * on_wire;
    r.model_seconds = through_ps / s.rate;
    r.busbw = r.seconds > 0 ? through_ps / r.seconds : 0;
    Progress(r);
    results.push_back(r);
  }
  return results;
}

}  // namespace kubetrain::network_bench
