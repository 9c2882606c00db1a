// ps_throughput: how close the parameter server's push+pull path gets to the machine's loopback
// TCP throughput, on 127.0.0.1.
//
//   build/bin/ps_throughput [--model-mb=64] [--rounds=5] [--max-ps=4] [--json]
//                           [--ps-binary=build/bin/kubetrain-ps]
//
// First a plain socket pair moves the bytes of one push+pull (model bytes each way) several
// times: the reference. Then 1..max-ps PsServers serve a model of 16 equal variables (or fewer
// for small models) and one PsClient pushes and pulls it `rounds` times, in async mode (every
// push applies an SGD step) and in sync mode with one worker, over gRPC bytes ("grpc" rows);
// then one ps again with the client's shared-memory buffers ("shm" rows, ps/shared_memory.h:
// what a worker on the ps's host uses). The servers run in this process as threads, or with
// --ps-binary each in its own process (that program, e.g. kubetrain-ps). Throughput counts model
// bytes moved per second; "ratio" is push+pull throughput over raw TCP's. Timings are reported,
// never asserted: the CTest smoke run only checks that the table is printed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/main.h"
#include "bench/stats.h"
#include "common/flags.h"
#include "common/host_port.h"
#include "common/program.h"
#include "common/status.h"
#include "ps/client.h"
#include "ps/server.h"

namespace kubetrain {
namespace {

struct Options {
  int model_mb = 64;
  int rounds = 5;
  int max_ps = 4;
  int tcp_reps = 5;
  bool json = false;
  std::string ps_binary;  // empty: servers in this process
};

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- Raw loopback TCP reference ----

// Closes the descriptor it owns. Not thread-safe; move-only.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// A connected TCP pair over 127.0.0.1 (listener on an ephemeral port).
absl::StatusOr<std::pair<Fd, Fd>> ConnectedPair() {
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  if (listener.get() < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) return Errno("bind");
  if (::listen(listener.get(), 1) != 0) return Errno("listen");
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("getsockname");
  }
  Fd client(::socket(AF_INET, SOCK_STREAM, 0));
  if (client.get() < 0) return Errno("socket");
  if (::connect(client.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Errno("connect");
  }
  Fd server(::accept(listener.get(), nullptr, nullptr));
  if (server.get() < 0) return Errno("accept");
  const int one = 1;
  ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(server.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::make_pair(std::move(client), std::move(server));
}

bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool RecvAll(int fd, char* data, size_t n) {
  while (n > 0) {
    const ssize_t got = ::recv(fd, data, n, 0);
    if (got <= 0) return false;
    data += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// One push+pull's worth of traffic: `bytes` from "worker" to "ps", then `bytes` back, through
// distinct buffers on each side as a real push and pull would use. Returns seconds per rep.
absl::StatusOr<std::vector<double>> MeasureTcp(size_t bytes, int reps) {
  ASSIGN_OR_RETURN(auto pair, ConnectedPair());
  std::vector<char> worker_send(bytes, 1), worker_recv(bytes), ps_buf(bytes);
  std::vector<double> seconds;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up pages and socket buffers
    bool ps_ok = true;
    std::thread ps([&] {
      ps_ok = RecvAll(pair.second.get(), ps_buf.data(), bytes) &&
              SendAll(pair.second.get(), ps_buf.data(), bytes);
    });
    const auto start = Clock::now();
    const bool ok = SendAll(pair.first.get(), worker_send.data(), bytes) &&
                    RecvAll(pair.first.get(), worker_recv.data(), bytes);
    const double s = Seconds(start);
    ps.join();
    if (!ok || !ps_ok) return absl::UnavailableError("loopback transfer failed");
    if (rep > 0) seconds.push_back(s);
  }
  return seconds;
}

// ---- Parameter server ----

struct PsRow {
  int num_ps = 0;
  std::string mode;
  std::string transport;  // grpc or shm
  double push_mbps = 0;   // best round
  double pull_mbps = 0;
  double push_pull_mbps = 0;
  double ratio = 0;  // push+pull over raw TCP push+pull (best vs best)
};

std::vector<ps::VariableSpec> Model(size_t model_bytes) {
  // 16 equal variables: at 64 MiB each is 1 Mi floats, exactly one 4 MiB partition, so the
  // transfer is BytePS-sized messages spread over the ps tasks.
  const uint64_t elements = model_bytes / sizeof(float);
  const int count = elements >= 16 * 1024 ? 16 : 1;
  std::vector<ps::VariableSpec> vars;
  for (int i = 0; i < count; ++i) {
    vars.push_back({absl::StrCat("layer", i, "/kernel"), elements / count});
  }
  return vars;
}

// Waits (up to 10 s) until something accepts connections on 127.0.0.1:`port`, so the client's
// first call does not fail and back off.
absl::Status AwaitListening(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  for (int attempt = 0; attempt < 500; ++attempt) {
    Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat("no ps listening on port ", port, " after 10 s"));
}

// Owns the servers of one configuration (threads here, or processes of --ps-binary); stops them
// on destruction.
class Cluster {
 public:
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(int num_ps, const std::string& binary) {
    auto cluster = std::make_unique<Cluster>();
    for (int i = 0; i < num_ps; ++i) {
      if (binary.empty()) {
        ASSIGN_OR_RETURN(auto server, ps::PsServer::Start({.address = "127.0.0.1:0"}, nullptr));
        cluster->addresses_.push_back(server->address());
        cluster->servers_.push_back(std::move(server));
        continue;
      }
      // Bound and released: another process could take it in between, which then fails the
      // run loudly rather than measuring something else.
      ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
      std::vector<std::string> args = {binary, absl::StrCat("--port=", port),
                                       "--bind-address=127.0.0.1", "--metrics-port=0",
                                       "--log-level=warn"};
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      pid_t pid = 0;
      if (const int err = posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), environ);
          err != 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("starting ", binary, ": ", std::strerror(err)));
      }
      cluster->pids_.push_back(pid);
      cluster->addresses_.push_back(absl::StrCat("127.0.0.1:", port));
      RETURN_IF_ERROR(AwaitListening(port));
    }
    return cluster;
  }
  ~Cluster() {
    for (pid_t pid : pids_) ::kill(pid, SIGTERM);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
  }
  const std::vector<std::string>& addresses() const { return addresses_; }

 private:
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<ps::PsServer>> servers_;
  std::vector<pid_t> pids_;
};

// Buffers for every variable, and the span views PsClient takes.
struct Buffers {
  std::vector<std::vector<float>> grads, values;
  std::vector<std::span<const float>> grad_spans;
  std::vector<std::span<float>> value_spans;

  explicit Buffers(const ps::PlacementPlan& plan) {
    for (const ps::VariableSpec& v : plan.variables()) {
      grads.emplace_back(v.elements, 1e-3f);
      values.emplace_back(v.elements, 0.0f);
    }
    for (auto& g : grads) grad_spans.emplace_back(g);
    for (auto& v : values) value_spans.emplace_back(v);
  }
};

absl::StatusOr<PsRow> MeasurePs(int num_ps, ps::UpdateMode mode, bool shared_memory,
                                const Options& opt, size_t model_bytes, double tcp_best_mbps) {
  ASSIGN_OR_RETURN(auto cluster, Cluster::Start(num_ps, opt.ps_binary));
  ASSIGN_OR_RETURN(ps::PlacementPlan plan, ps::PlacementPlan::Build(Model(model_bytes), num_ps));
  ASSIGN_OR_RETURN(auto client, ps::PsClient::Create(cluster->addresses(), plan,
                                                     {.shared_memory = shared_memory}));
  RETURN_IF_ERROR(client->WaitReady(absl::Seconds(30), /*require_initialized=*/false));
  ps::ModelState state;
  state.config.mode = mode;
  state.config.replicas_to_aggregate = 1;
  state.config.optimizer.kind = ps::OptimizerKind::kSgd;
  state.config.optimizer.learning_rate = 0.01;
  state.run_id = "bench";
  for (const ps::VariableSpec& v : plan.variables()) {
    state.variables.push_back({v.name, std::vector<float>(v.elements, 0.5f), {}});
  }
  RETURN_IF_ERROR(client->Init(state));
  state = {};
  Buffers buf(plan);
  ASSIGN_OR_RETURN(ps::Version version, client->Pull(buf.value_spans));
  const bool sync = mode == ps::UpdateMode::kSync;
  double best_push = 1e9, best_pull = 1e9, best_both = 1e9;
  for (int round = 0; round <= opt.rounds; ++round) {  // round 0 warms up connections and pages
    const auto start = Clock::now();
    ASSIGN_OR_RETURN(ps::PushResult pushed, client->Push(buf.grad_spans, version));
    const double push_s = Seconds(start);
    if (pushed.stale != 0) return absl::InternalError("benchmark push was dropped as stale");
    const auto pull_start = Clock::now();
    const ps::Version next = version.Next();
    ASSIGN_OR_RETURN(version, client->Pull(buf.value_spans, sync ? &next : nullptr));
    const double pull_s = Seconds(pull_start);
    if (round == 0) continue;
    best_push = std::min(best_push, push_s);
    best_pull = std::min(best_pull, pull_s);
    best_both = std::min(best_both, push_s + pull_s);
  }
  const double mb = static_cast<double>(model_bytes) / 1e6;
  PsRow row{num_ps,         sync ? "sync" : "async", shared_memory ? "shm" : "grpc",
            mb / best_push, mb / best_pull,          2 * mb / best_both};
  row.ratio = row.push_pull_mbps / tcp_best_mbps;
  return row;
}

// ---- Output ----

struct Report {
  size_t model_bytes = 0;
  int rounds = 0;
  std::string servers;  // "threads" or the ps binary's path
  double tcp_best_mbps = 0, tcp_median_mbps = 0;
  std::vector<PsRow> rows;

  // The best gRPC row: the ratio to raw TCP is a measure of the socket path.
  const PsRow* Best() const {
    const PsRow* best = nullptr;
    for (const PsRow& r : rows) {
      if (r.transport == "grpc" && (best == nullptr || r.ratio > best->ratio)) best = &r;
    }
    return best;
  }
};

void PrintTable(const Report& r) {
  std::printf("ps_throughput: model %.1f MB, %d rounds, 127.0.0.1, servers %s\n",
              r.model_bytes / 1e6, r.rounds, r.servers.c_str());
  std::printf("raw TCP loopback (push+pull bytes): best %.0f MB/s, median %.0f MB/s\n",
              r.tcp_best_mbps, r.tcp_median_mbps);
  std::printf("%-4s %-6s %-5s %12s %12s %16s %8s\n", "ps", "mode", "path", "push MB/s", "pull MB/s",
              "push+pull MB/s", "ratio");
  for (const PsRow& row : r.rows) {
    std::printf("%-4d %-6s %-5s %12.0f %12.0f %16.0f %8.2f\n", row.num_ps, row.mode.c_str(),
                row.transport.c_str(), row.push_mbps, row.pull_mbps, row.push_pull_mbps, row.ratio);
  }
  if (const PsRow* best = r.Best()) {
    std::printf("best ratio %.2f (%d ps, %s, grpc) of raw TCP; goal >= 0.50\n", best->ratio,
                best->num_ps, best->mode.c_str());
  }
}

void PrintJson(const Report& r) {
  std::string rows;
  for (const PsRow& row : r.rows) {
    absl::StrAppend(&rows, rows.empty() ? "" : ",",
                    absl::StrFormat("{\"ps\":%d,\"mode\":\"%s\",\"transport\":\"%s\","
                                    "\"push_mbps\":%.1f,\"pull_mbps\":%.1f,\"push_pull_mbps\":"
                                    "%.1f,\"ratio\":%.3f}",
                                    row.num_ps, row.mode, row.transport, row.push_mbps,
                                    row.pull_mbps, row.push_pull_mbps, row.ratio));
  }
  const PsRow* best = r.Best();
  std::printf(
      "{\"model_bytes\":%zu,\"rounds\":%d,\"tcp_best_mbps\":%.1f,\"tcp_median_mbps\":%.1f,"
      "\"rows\":[%s],\"best_ratio\":%.3f}\n",
      r.model_bytes, r.rounds, r.tcp_best_mbps, r.tcp_median_mbps, rows.c_str(),
      best != nullptr ? best->ratio : 0.0);
}

absl::Status Run(const Options& opt) {
  if (opt.model_mb < 1 || opt.rounds < 1 || opt.max_ps < 1 || opt.tcp_reps < 1) {
    return absl::InvalidArgumentError("--model-mb, --rounds, --max-ps and --tcp-reps must be >= 1");
  }
  Report report;
  report.model_bytes = static_cast<size_t>(opt.model_mb) << 20;
  report.rounds = opt.rounds;
  report.servers = opt.ps_binary.empty() ? "in this process" : "processes of " + opt.ps_binary;
  ASSIGN_OR_RETURN(std::vector<double> tcp, MeasureTcp(report.model_bytes, opt.tcp_reps));
  const double mb = 2.0 * static_cast<double>(report.model_bytes) / 1e6;
  report.tcp_best_mbps = mb / *std::min_element(tcp.begin(), tcp.end());
  report.tcp_median_mbps = mb / bench::Median(tcp);
  for (bool shm : {false, true}) {
    for (int n = 1; n <= (shm ? 1 : opt.max_ps); ++n) {
      ASSIGN_OR_RETURN(PsRow row, MeasurePs(n, ps::UpdateMode::kAsync, shm, opt, report.model_bytes,
                                            report.tcp_best_mbps));
      report.rows.push_back(row);
    }
    ASSIGN_OR_RETURN(PsRow sync, MeasurePs(1, ps::UpdateMode::kSync, shm, opt, report.model_bytes,
                                           report.tcp_best_mbps));
    report.rows.push_back(sync);
  }
  opt.json ? PrintJson(report) : PrintTable(report);
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  using namespace kubetrain;
  Options opt;
  FlagSet flags("ps_throughput", "Parameter-server push+pull throughput vs raw loopback TCP.");
  flags.Add("model-mb", &opt.model_mb, "model size in MiB (pushed and pulled each round)");
  flags.Add("rounds", &opt.rounds, "timed push+pull rounds per configuration (best is reported)");
  flags.Add("max-ps", &opt.max_ps, "measure 1..max-ps parameter servers");
  flags.Add("tcp-reps", &opt.tcp_reps, "timed raw TCP repetitions");
  flags.Add("json", &opt.json, "print one JSON object instead of the table");
  flags.Add("ps-binary", &opt.ps_binary,
            "run each ps as this program (kubetrain-ps) in its own process; empty: threads here");
  return bench::RunMain("ps_throughput", flags, argc, argv, [&] { return Run(opt); });
}
