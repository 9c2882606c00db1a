// The roles network_bench's children run inside their sandboxes (roles.h).
#include "bench/network/roles.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/allreduce/pattern.h"
#include "bench/allreduce/timed_allreduce.h"
#include "common/status.h"
#include "ps/client.h"
#include "ps/server.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/gloo_communicator.h"

namespace kubetrain::network_bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One rank: join the coordinator, connect the ring, and run the timed all-reduces
// (bench/allreduce/timed_allreduce.h).
absl::Status RunRingRank(const Options& opt, const std::vector<size_t>& sizes) {
  ASSIGN_OR_RETURN(auto store,
                   worker::CoordinatorClient::Connect({.address = opt.coordinator,
                                                       .rank = opt.rank,
                                                       .world_size = opt.nodes,
                                                       .connect_timeout = absl::Seconds(30),
                                                       .secret = opt.secret}));
  ASSIGN_OR_RETURN(auto comm, worker::GlooCommunicator::Create(*store, {.rank = opt.rank,
                                                                        .size = opt.nodes,
                                                                        .hostname = opt.host,
                                                                        .timeout = opt.timeout,
                                                                        .bind_cpus = false}));
  ASSIGN_OR_RETURN(ps::WireFloat wire, Compression(opt));
  RETURN_IF_ERROR(
      bench::TimeAllReduces(*comm, opt.rank, opt.nodes, sizes, opt.warmup, opt.iters, wire));
  (void)comm->Close();
  return absl::OkStatus();
}

// 16 equal variables (one for small models), as bench/ps_throughput measures.
std::vector<ps::VariableSpec> Model(size_t bytes) {
  const uint64_t elements = bytes / sizeof(float);
  const int count = elements >= 16 * 1024 && elements % 16 == 0 ? 16 : 1;
  std::vector<ps::VariableSpec> vars;
  for (int i = 0; i < count; ++i) {
    vars.push_back({absl::StrCat("layer", i, "/kernel"), elements / count});
  }
  return vars;
}

// The client's default, named here so that PsPieces counts what the workers do.
constexpr uint64_t kMinPieceBytes = ps::ClientOptions{}.min_piece_bytes;

absl::StatusOr<size_t> OneSize(const Options& opt) {
  ASSIGN_OR_RETURN(std::vector<size_t> sizes, ParseSizes(opt.sizes));
  if (sizes.size() != 1) return absl::InvalidArgumentError("--role=ps*: give one size");
  return sizes[0];
}

// Shard opt.shard of opt.shards: the plan is the product's (PlacementPlan over the ps count), so
// each shard holds the partitions a job with that many ps tasks would place on it.
absl::Status RunPs(const Options& opt) {
  ASSIGN_OR_RETURN(size_t bytes, OneSize(opt));
  ASSIGN_OR_RETURN(auto server, ps::PsServer::Start({.address = opt.host + ":0"}, nullptr));
  ASSIGN_OR_RETURN(ps::PlacementPlan plan, ps::PlacementPlan::Build(Model(bytes), opt.shards));
  // Every slot names this server: InitShard talks to slot opt.shard only, over the server's own
  // address, so the model's bytes never cross the uplink.
  ASSIGN_OR_RETURN(auto client,
                   ps::PsClient::Create(std::vector<std::string>(opt.shards, server->address()),
                                        plan, {.shared_memory = false}));
  RETURN_IF_ERROR(client->WaitReady(absl::Seconds(30), /*require_initialized=*/false));
  ps::ModelState state;
  state.config.mode = ps::UpdateMode::kSync;
  state.config.replicas_to_aggregate = opt.nodes;
  state.config.optimizer.kind = ps::OptimizerKind::kSgd;
  state.config.optimizer.learning_rate = 0.01;
  state.run_id = "network-bench";
  for (const ps::VariableSpec& v : plan.variables()) {
    state.variables.push_back({v.name, std::vector<float>(v.elements, 0.5f), {}});
  }
  RETURN_IF_ERROR(client->InitShard(opt.shard, state));
  state = {};
  client.reset();
  std::printf("ready %s\n", server->address().c_str());
  std::fflush(stdout);
  for (;;) ::pause();  // the driver kills this process once the workers are done
}

// Sync-mode steps as a worker takes them: push the gradients computed at v, pull step v+1.
absl::Status RunPsWorker(const Options& opt) {
  ASSIGN_OR_RETURN(size_t bytes, OneSize(opt));
  ASSIGN_OR_RETURN(ps::WireFloat wire, Compression(opt));
  std::vector<std::string> shards = absl::StrSplit(opt.ps, ',', absl::SkipEmpty());
  ASSIGN_OR_RETURN(ps::PlacementPlan plan,
                   ps::PlacementPlan::Build(Model(bytes), static_cast<int>(shards.size())));
  ASSIGN_OR_RETURN(auto client, ps::PsClient::Create(
                                    std::move(shards), plan,
                                    {.rpc_timeout = opt.timeout,
                                     .pull_timeout = opt.timeout,
                                     .worker = static_cast<uint32_t>(opt.rank),
                                     .shared_memory = false,
                                     .compression = wire,
                                     .pipeline = opt.ps_pieces > 1,
                                     .min_piece_bytes = kMinPieceBytes,
                                     .max_pieces = opt.ps_pieces,
                                     .push_window_bytes = uint64_t(opt.ps_push_window_mb) << 20}));
  RETURN_IF_ERROR(client->WaitReady(absl::Seconds(30), /*require_initialized=*/true));
  std::vector<std::vector<float>> grads, values;
  std::vector<std::span<const float>> grad_spans;
  std::vector<std::span<float>> value_spans;
  for (const ps::VariableSpec& v : plan.variables()) {
    grads.emplace_back(v.elements, 1e-3f);
    values.emplace_back(v.elements, 0.0f);
  }
  for (auto& g : grads) grad_spans.emplace_back(g);
  for (auto& v : values) value_spans.emplace_back(v);
  ASSIGN_OR_RETURN(ps::Version version, client->Pull(value_spans));
  std::vector<double> seconds;
  for (int it = 0; it < opt.warmup + opt.iters; ++it) {
    const ps::Version next = version.Next();
    const auto start = Clock::now();
    ASSIGN_OR_RETURN(ps::PushResult step,
                     client->PushAndPull(grad_spans, version, value_spans, &next));
    const double s = Since(start);
    if (step.stale != 0) return absl::InternalError("a push was dropped as stale");
    version = step.version;
    if (it >= opt.warmup) seconds.push_back(s);
  }
  bench::PrintResult(bytes, 0, seconds);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<size_t>> ParseSizes(absl::string_view text) {
  return bench::ParseSizes(text, uint64_t{4} << 30);
}

int PsPieces(const Options& opt, size_t bytes, int shards) {
  if (opt.ps_pieces <= 1) return 1;
  auto plan = ps::PlacementPlan::Build(Model(bytes), shards);
  if (!plan.ok()) return 1;
  size_t most = 1;
  for (int ps = 0; ps < shards; ++ps) {
    most = std::max(most, plan->Pieces(ps, kMinPieceBytes, opt.ps_pieces).size());
  }
  return static_cast<int>(most);
}

absl::StatusOr<ps::WireFloat> Compression(const Options& opt) {
  std::optional<ps::WireFloat> wire = ps::ParseWireFloat(opt.compression);
  if (!wire) {
    return absl::InvalidArgumentError(absl::StrCat("--gradient-compression: unknown \"",
                                                   opt.compression,
                                                   "\"; allowed: ", ps::WireFloatNames()));
  }
  return *wire;
}

absl::Status RunRole(const Options& opt) {
  if (opt.role == "ring-rank") {
    if (opt.rank < 0 || opt.rank >= opt.nodes || opt.coordinator.empty() || opt.host.empty()) {
      return absl::InvalidArgumentError("--role=ring-rank needs --rank, --coordinator, --host");
    }
    ASSIGN_OR_RETURN(std::vector<size_t> sizes, ParseSizes(opt.sizes));
    return RunRingRank(opt, sizes);
  }
  if (opt.role == "ps") {
    if (opt.host.empty() || opt.shards < 1 || opt.shard < 0 || opt.shard >= opt.shards) {
      return absl::InvalidArgumentError("--role=ps needs --host and 0 <= --shard < --shards");
    }
    return RunPs(opt);
  }
  if (opt.role == "ps-worker") {
    if (opt.rank < 0 || opt.ps.empty()) {
      return absl::InvalidArgumentError("--role=ps-worker needs --rank and --ps");
    }
    return RunPsWorker(opt);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--role: unknown \"", opt.role, "\"; one of ring-rank, ps, ps-worker"));
}

}  // namespace kubetrain::network_bench
