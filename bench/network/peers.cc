// network_bench's peers on the same links (peers.h).
#include "bench/network/peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/allreduce/processes.h"
#include "bench/network/children.h"
#include "common/status.h"

namespace kubetrain::network_bench {
namespace {

constexpr char kInstallTorch[] =
    "install it with `scripts/install-deps --peers` (Debian's python3-torch)";

// The last non-empty line of `text`, for a skip reason.
std::string LastLine(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : std::string(absl::StripAsciiWhitespace(lines.back()));
}

bool Interruption(const absl::Status& s) {
  return absl::IsCancelled(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

absl::StatusOr<bool> TorchUsable(Setup& s, absl::string_view mode) {
  Children probe(s.stop, s.deadline);
  ASSIGN_OR_RETURN(int id, probe.Start(*s.ranks[0],
                                       {"python3", "-c",
                                        "import torch, torch.distributed as d\n"
                                        "assert d.is_available() and d.is_gloo_available()\n"
                                        "print('PyTorch', torch.__version__)"},
                                       BaseEnv()));
  absl::Status probed = probe.WaitExit({id});
  if (Interruption(probed)) return probed;
  if (!probed.ok()) {
    s.notes.push_back(absl::StrCat(mode, ": skipped: python3 cannot import torch.distributed ",
                                   "with gloo (", LastLine(probed.message()), "); ",
                                   kInstallTorch));
    return false;
  }
  s.notes.push_back(absl::StrCat(mode, ": ", LastLine(probe.output(id)),
                                 ", gloo backend, one intra-op thread per rank"));
  return true;
}

absl::StatusOr<std::vector<Result>> RunTorchGloo(Setup& s) {
  const std::string script = absl::StrCat(KUBETRAIN_SOURCE_DIR, "/bench/network/torch_rank.py");
  if (::access(script.c_str(), R_OK) != 0) {
    s.notes.push_back(absl::StrCat("torch-gloo: skipped: ", script, " is missing"));
    return std::vector<Result>{};
  }
  ASSIGN_OR_RETURN(const bool usable, TorchUsable(s, "torch-gloo"));
  if (!usable) return std::vector<Result>{};
  const int n = s.opt.nodes;
  ASSIGN_OR_RETURN(int port, FreePort(*s.ranks[0]));
  const double seconds_left = absl::ToDoubleSeconds(s.deadline - absl::Now());
  std::map<std::string, std::string> env = BaseEnv();
  env["GLOO_SOCKET_IFNAME"] = "eth0";
  env["OMP_NUM_THREADS"] = "1";
  Children children(s.stop, s.deadline);
  std::vector<int> ids;
  for (int rank = 0; rank < n; ++rank) {
    std::vector<std::string> argv = {"python3",
                                     script,
                                     absl::StrCat("--rank=", rank),
                                     absl::StrCat("--world=", n),
                                     absl::StrCat("--master=", s.ranks[0]->ip(), ":", port),
                                     absl::StrCat("--sizes=", absl::StrJoin(s.sizes, ",")),
                                     absl::StrCat("--iters=", s.opt.iters),
                                     absl::StrCat("--warmup=", s.opt.warmup),
                                     absl::StrCat("--deadline=", std::max(1.0, seconds_left))};
    ASSIGN_OR_RETURN(int id, children.Start(*s.ranks[rank], std::move(argv), env));
    ids.push_back(id);
  }
  RETURN_IF_ERROR(children.WaitExit(ids));
  ASSIGN_OR_RETURN(auto times, Parse({children.output(ids[0])}, s.opt.iters));
  return AllReduceRows(s, "torch-gloo", times, ps::WireFloat::kFloat32);
}

absl::StatusOr<std::vector<Result>> RunMpi(Setup& s) {
#if !defined(KUBETRAIN_MPI_ALLREDUCE) || !defined(KUBETRAIN_MPIRUN)
  s.notes.push_back(
      "mpi: skipped: not built, CMake found no MPI (install openmpi-bin and libopenmpi-dev, e.g. "
      "with scripts/install-deps, then re-run cmake)");
  return std::vector<Result>{};
#else
  const std::string mpirun = KUBETRAIN_MPIRUN, program = KUBETRAIN_MPI_ALLREDUCE;
  for (const std::string& path : {mpirun, program}) {
    if (::access(path.c_str(), X_OK) != 0) {
      s.notes.push_back(absl::StrCat("mpi: skipped: ", path, " is not executable (",
                                     path == mpirun ? "install openmpi-bin" : "build mpi_allreduce",
                                     ")"));
      return std::vector<Result>{};
    }
  }
  const int n = s.opt.nodes;
  std::vector<std::string> hosts, nodes;
  for (const sandbox::Sandbox* rank : s.ranks) {
    hosts.push_back(absl::StrCat(rank->ip(), ":1"));
    nodes.push_back(absl::StrCat(rank->ip(), "=", rank->netns(), "=", rank->name()));
  }
  // The nodes' own /tmp: the agent gives each a folder here (RunRsh).
  ASSIGN_OR_RETURN(std::unique_ptr<TempDir> tmp, TempDir::Make());
  std::vector<std::string> argv = {
      mpirun, "-np", absl::StrCat(n), "--host", absl::StrJoin(hosts, ","),
      // Every sandbox a remote node, reached through this program as through ssh.
      "--mca", "plm", "rsh", "--mca", "plm_rsh_agent",
      absl::StrCat(bench::SelfPath(), " --role=rsh"), "--mca", "plm_rsh_no_tree_spawn", "1",
      // The daemons stay the agent's children with their output on mpirun's, rather than
      // daemonizing with it thrown away: one that dies then fails the run with its reason
      // instead of leaving mpirun waiting for it.
      "--mca", "orte_leave_session_attached", "1",
      // The daemons call mpirun back over the sandbox network: its bridges' addresses on the
      // host, eth0 in the sandboxes.
      "--mca", "oob_tcp_if_include", s.net->block_cidr(),
      // The ranks' bytes over TCP on the shaped uplinks only: no UCX, no shared memory.
      "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "eth0",
      // All the "nodes" share this machine's cores: ranks yield while they wait, as OpenMPI's
      // do when it knows a host is oversubscribed, instead of spinning on a core another
      // node's rank needs.
      "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"};
  // Containers and CI often run as root, which mpirun refuses unless told.
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  for (std::string a :
       {program, absl::StrCat("--sizes=", absl::StrJoin(s.sizes, ",")),
        absl::StrCat("--iters=", s.opt.iters), absl::StrCat("--warmup=", s.opt.warmup)}) {
    argv.push_back(std::move(a));
  }
  std::map<std::string, std::string> env = BaseEnv();
  env[kNodesEnv] = absl::StrJoin(nodes, ",");
  env[kNodesTmpEnv] = tmp->path();
  Children children(s.stop, s.deadline);
  ASSIGN_OR_RETURN(int id, children.StartOnHost(std::move(argv), env));
  RETURN_IF_ERROR(children.WaitExit({id}));
  s.notes.push_back("mpi: OpenMPI's MPI_Allreduce, ob1 PML, tcp BTL on eth0, one orted per node");
  ASSIGN_OR_RETURN(auto times, Parse({children.output(id)}, s.opt.iters));
  return AllReduceRows(s, "mpi", times, ps::WireFloat::kFloat32);
#endif
}

int RunRsh(const std::vector<std::string>& args) {
  const char* table = std::getenv(kNodesEnv);
  struct Node {
    std::string netns, name;
  };
  std::map<std::string, Node> nodes;
  for (absl::string_view entry : absl::StrSplit(table ? table : "", ',', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(entry, '=');
    if (fields.size() == 3) nodes[fields[0]] = {fields[1], fields[2]};
  }
  size_t host = 0;
  while (host < args.size() && !nodes.count(args[host])) ++host;
  if (host + 1 >= args.size()) {
    std::fprintf(stderr,
                 "network_bench --role=rsh: no sandbox IP (from %s) followed by a command in: %s\n",
                 kNodesEnv, absl::StrJoin(args, " ").c_str());
    return 255;
  }
  const Node& node = nodes[args[host]];
  // A host of its own, as ssh would reach: its own name and /tmp. OpenMPI keys its session
  // folders and PMIx's shared-memory store by host name under TMPDIR, so daemons that shared
  // both would take each other's files.
  if (::unshare(CLONE_NEWUTS) != 0 || ::sethostname(node.name.data(), node.name.size()) != 0) {
    std::fprintf(stderr, "network_bench --role=rsh: host name %s: %s\n", node.name.c_str(),
                 std::strerror(errno));
    return 255;
  }
  const char* tmp_root = std::getenv(kNodesTmpEnv);
  const std::string tmp = absl::StrCat(tmp_root ? tmp_root : "", "/", node.name);
  if (tmp_root == nullptr || (::mkdir(tmp.c_str(), 0700) != 0 && errno != EEXIST) ||
      ::setenv("TMPDIR", tmp.c_str(), 1) != 0) {
    std::fprintf(stderr, "network_bench --role=rsh: TMPDIR %s: %s\n", tmp.c_str(),
                 tmp_root ? std::strerror(errno) : "no folder given");
    return 255;
  }
  const std::string command =
      absl::StrJoin(args.begin() + static_cast<std::ptrdiff_t>(host) + 1, args.end(), " ");
  std::vector<std::string> words = {"ip", "netns", "exec", node.netns, "/bin/sh", "-c", command};
  std::vector<char*> exec_argv;
  for (std::string& w : words) exec_argv.push_back(w.data());
  exec_argv.push_back(nullptr);
  ::execvp("ip", exec_argv.data());
  std::fprintf(stderr, "network_bench --role=rsh: exec ip: %s\n", std::strerror(errno));
  return 127;
}

}  // namespace kubetrain::network_bench
