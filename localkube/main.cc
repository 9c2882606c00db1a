// localkube: a Kubernetes API server on 127.0.0.1 for end-to-end tests, optionally running pods
// as local processes. See localkube/README.md.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/program.h"
#include "common/status.h"
#include "localkube/api.h"
#include "localkube/default_tolerations.h"
#include "localkube/kubelet.h"
#include "localkube/node_agents.h"
#include "localkube/node_faults.h"
#include "localkube/node_lifecycle.h"
#include "localkube/persistent_volumes.h"
#include "localkube/root_ca_publisher.h"
#include "localkube/scheduler.h"
#include "localkube/server.h"
#include "localkube/service_accounts.h"
#include "localkube/tls.h"
#include "localkube/volume_binding.h"
#include "localkube/workloads.h"

// LeakSanitizer (clang's AddressSanitizer build) checks for leaks as the program exits.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KT_LEAK_CHECKED
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(KT_LEAK_CHECKED)
#define KT_LEAK_CHECKED
#endif

namespace kubetrain::localkube {
namespace {

struct Options {
  int port = 0;
  std::string token;
  std::string kubeconfig_out;
  std::string address_file;
  bool run_pods = false;
  std::string pod_network = "auto";
  std::string node_bandwidth;
  std::string hosts_file;
  std::string pod_log_dir;
  std::string data_dir;
  std::vector<std::string> image_map;
  std::string runtime = "process";
  absl::Duration drop_watches_every = absl::ZeroDuration();
  double error_rate = 0;
  absl::Duration latency = absl::ZeroDuration();
  absl::Duration compact_every = absl::ZeroDuration();
  std::string log_level = "info";
  bool insecure_http = false;
  bool rbac = false;
  std::string authz_log;
  std::vector<std::string> user_tokens;
  absl::Duration node_monitor_grace_period = absl::Seconds(40);
  absl::Duration node_status_update_frequency = absl::Seconds(10);
  int64_t default_toleration_seconds = 300;
  int nodes = 1;
  std::vector<std::string> node_capacity;
  std::vector<std::string> node_labels;
};

absl::StatusOr<Options> ParseOptions(int argc, char** argv) {
  Options o;
  FlagSet flags("localkube",
                "Serves the Kubernetes API on 127.0.0.1 from memory; with --run-pods also runs "
                "pods as local processes.");
  flags.Add("port", &o.port, "TCP port on 127.0.0.1; 0 picks a free one").Port();
  flags.Add("token", &o.token, "bearer token clients must send; empty accepts any request");
  flags.Add("kubeconfig-out", &o.kubeconfig_out, "write a kubeconfig for this server here");
  flags.Add("address-file", &o.address_file, "write the server URL here once listening");
  flags.Add("run-pods", &o.run_pods, "run pods as local processes (the kubelet)");
  flags.Add("hosts-file", &o.hosts_file,
            "also write every pod's cluster names here, hosts(5) style (pods read their own "
            "/etc/hosts)");
  flags.Add("pod-network", &o.pod_network,
            "sandbox (each pod in its own namespaces on its node's bridge; needs root) or host "
            "(pods share this host's network); default: sandbox where it can work, else host");
  flags.Add("node-bandwidth", &o.node_bandwidth,
            "with sandboxes: shape each node's uplink to this rate, e.g. 100Mbit or 1Gbit");
  flags.Add("pod-log-dir", &o.pod_log_dir, "where container logs go (default: a temp dir)");
  flags.Add("data-dir", &o.data_dir,
            "where PersistentVolumes live: local-path ones in <dir>/<node>/pvc-<uid>, shared-path "
            "ones in <dir>/shared/pvc-<uid> (default: a temp dir removed at exit)");
  flags.Add("runtime", &o.runtime,
            "process (run each container's command on this host) or oci (run it from its image "
            "with buildah; needs root)");
  flags.Add("image-map", &o.image_map,
            "PREFIX=DIR: images starting with PREFIX run binaries from DIR (repeatable; "
            "kubetrain/ defaults to localkube's own folder)");
  flags.Add("drop-watches-every", &o.drop_watches_every, "cut every watch after this long");
  flags.Add("error-rate", &o.error_rate,
            "fraction of non-watch requests answered 500 or 429 (with Retry-After)");
  flags.Add("latency", &o.latency, "delay added to every non-watch request");
  flags.Add("compact-every", &o.compact_every,
            "drop watch history this often (watches resuming from before get 410 Expired)");
  flags.Add("log-level", &o.log_level, "debug, info, warn or error");
  flags.Add("insecure-http", &o.insecure_http,
            "serve plain HTTP (kubectl and helm then send no bearer token)");
  flags.Add("rbac", &o.rbac,
            "authorize requests with RBAC (the --token user is in system:masters and bypasses it)");
  flags.Add("authz-log", &o.authz_log,
            "with --rbac: append every authorization decision here, one JSON line each");
  flags.Add("user-token", &o.user_tokens,
            "TOKEN=USERNAME[,GROUP...]: another bearer token and its user (repeatable)");
  flags
      .Add("node-status-update-frequency", &o.node_status_update_frequency,
           "how often each node renews its Lease and Ready condition (the kubelet's flag); keep "
           "it well under --node-monitor-grace-period")
      .AtLeast(absl::Milliseconds(10));
  flags
      .Add("node-monitor-grace-period", &o.node_monitor_grace_period,
           "a node whose heartbeat (Lease) is older than this is marked Unknown and tainted "
           "unreachable")
      .AtLeast(absl::Milliseconds(1));
  flags
      .Add("default-toleration-seconds", &o.default_toleration_seconds,
           "tolerationSeconds of the not-ready and unreachable NoExecute tolerations added to "
           "every pod that has none")
      .AtLeast(0);
  flags
      .Add("nodes", &o.nodes,
           "with --run-pods: how many nodes (node-1 .. node-N) pods are "
           "scheduled onto")
      .Range(1, 16);
  flags.Add(
      "node-capacity", &o.node_capacity,
      "[NODE:]RESOURCE=QUANTITY,...: every node's capacity, or with NODE: that node's "
      "(repeatable; default cpu=64,memory=256Gi,pods=110; e.g. node-2:cpu=4,nvidia.com/gpu=1)");
  flags.Add("node-labels", &o.node_labels,
            "[NODE:]KEY=VALUE,...: labels of every node, or with NODE: of that node (repeatable)");
  ASSIGN_OR_RETURN(std::vector<std::string> rest, flags.Parse(argc, argv));
  if (!rest.empty()) return absl::InvalidArgumentError("localkube takes no positional arguments");
  RETURN_IF_ERROR(log::SetLevelFlag(o.log_level));
  if (!o.run_pods && (o.nodes != 1 || !o.node_capacity.empty() || !o.node_labels.empty())) {
    return absl::InvalidArgumentError(
        "--nodes, --node-capacity and --node-labels need --run-pods: without it localkube "
        "serves the API alone, with no nodes; add --run-pods");
  }
  return o;
}

int Run(int argc, char** argv) {
  auto options = ParseOptions(argc, argv);
  if (!options.ok()) return UsageExit("localkube", options.status());
  // Block the stop signals in every thread; main waits for them with sigwait.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::string> scratch;  // temp dirs we made, removed on exit
  Registry registry;
  Store store;
  Api api(&registry, &store);
  SetDefaultTolerationSeconds(options->default_toleration_seconds,
                              options->default_toleration_seconds);
  // Node health, taint-based eviction and pod GC (node_lifecycle.h).
  NodeLifecycleController node_lifecycle(
      &api, {.monitor_grace_period = options->node_monitor_grace_period});
  // Issues and authenticates ServiceAccount tokens (TokenRequest, the kubelet's projected tokens).
  auto sa_tokens = std::make_shared<ServiceAccountTokens>(&store);
  std::unique_ptr<WorkloadControllers> workloads;  // the Deployment and ReplicaSet controllers
  std::unique_ptr<Kubelet> kubelet;
  std::unique_ptr<NodeAgents> nodes;     // the nodes' registration and heartbeats
  std::unique_ptr<Scheduler> scheduler;  // binds pods to them
  if (options->run_pods) {
    auto specs = ParseNodeSpecs(options->nodes, options->node_capacity, options->node_labels);
    if (!specs.ok()) return UsageExit("localkube", specs.status());
    NodeAgentsOptions n;
    n.nodes = std::move(*specs);
    n.period = options->node_status_update_frequency;
    nodes = std::make_unique<NodeAgents>(std::move(n), &api);
    scheduler = std::make_unique<Scheduler>(&api);
    KubeletOptions k;
    k.node_names = nodes->names();
    k.hosts_file = options->hosts_file;
    k.log_dir = options->pod_log_dir;
    if (k.log_dir.empty()) {
      k.log_dir =
          (std::filesystem::temp_directory_path() / absl::StrCat("localkube-logs-", getpid()))
              .string();
      scratch.push_back(k.log_dir);
    }
    for (const std::string& m : options->image_map) {
      size_t eq = m.find('=');
      if (eq == std::string::npos) {
        std::cerr << "localkube: --image-map wants PREFIX=DIR, got " << m << "\n";
        return 2;
      }
      k.image_map.emplace_back(m.substr(0, eq), m.substr(eq + 1));
    }
    // kubetrain's own images run the programs built beside localkube unless --image-map says
    // otherwise (process runtime: an image names no binary by itself).
    bool kubetrain_mapped = false;
    for (const auto& [prefix, dir] : k.image_map) kubetrain_mapped |= prefix == "kubetrain/";
    std::error_code exe_error;
    std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", exe_error);
    if (!kubetrain_mapped && !exe_error) {
      k.image_map.emplace_back("kubetrain/", exe.parent_path().string());
      log::Info("Images kubetrain/* run programs from localkube's folder",
                {{"dir", exe.parent_path().string()}});
    }
    k.runtime = options->runtime;
    k.pod_network.mode = options->pod_network;
    if (!options->node_bandwidth.empty()) {
      auto rate = ParseBitRate(options->node_bandwidth, "--node-bandwidth");
      if (!rate.ok()) return UsageExit("localkube", rate.status());
      k.pod_network.uplink_bits_per_second = *rate;
    }
    // Projected serviceAccountToken volumes get tokens the API server itself accepts.
    k.service_account_token = [sa_tokens](const std::string& ns, const std::string& sa,
                                          const std::string& audience, int64_t seconds) {
      return sa_tokens->IssueToken(ns, sa, audience, seconds);
    };
    if (absl::Status st = Kubelet::CheckOptions(k); !st.ok()) {
      std::cerr << "localkube: " << st.message() << "\n";
      return 2;
    }
    kubelet = std::make_unique<Kubelet>(k, &api);
    if (!kubelet->pod_network_status().ok()) {
      std::cerr << "localkube: " << kubelet->pod_network_status().message() << "\n";
      return 1;
    }
    api.EnableGracefulPodDeletion();
    workloads = std::make_unique<WorkloadControllers>(&api);
  }
  ServerOptions s;
  // Sandboxed pods reach the API server at their node's bridge address.
  if (PodNetwork* net = kubelet ? kubelet->pod_network() : nullptr) {
    for (int i = 0; i < net->nodes(); ++i) s.also_listen_on.push_back(net->node_gateway(i));
  }
  std::string ca_pem;
  if (!options->insecure_http) {
    std::string dir =
        (std::filesystem::temp_directory_path() / absl::StrCat("localkube-tls-", getpid()))
            .string();
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);  // holds the key
    scratch.push_back(dir);
    auto tls = MakeSelfSignedCert(dir, s.also_listen_on);
    if (!tls.ok()) {
      std::cerr << "localkube: " << tls.status().message() << "\n";
      return 1;
    }
    s.cert_path = tls->cert_path;
    s.key_path = tls->key_path;
    ca_pem = tls->cert_pem;
  }
  s.port = options->port;
  s.token = options->token;
  s.rbac = options->rbac;
  s.authz_log = options->authz_log;
  s.service_account_tokens = sa_tokens;
  for (const std::string& flag : options->user_tokens) {
    auto user = ParseUserToken(flag);
    if (!user.ok()) {
      std::cerr << "localkube: " << user.status().message() << "\n";
      return 2;
    }
    s.user_tokens[user->first] = user->second;
  }
  if (nodes && kubelet) {  // a node's machine or link failing on demand (node_faults.h)
    s.node_fault = [nodes = nodes.get(), kubelet = kubelet.get()](const std::string& node,
                                                                  const std::string& action) {
      return ApplyNodeFault(nodes, kubelet, node, action);
    };
  }
  s.drop_watches_every = options->drop_watches_every;
  s.error_rate = options->error_rate;
  s.latency = options->latency;
  s.compact_every = options->compact_every;
  // Every namespace's kube-root-ca.crt (and default ServiceAccount), before anyone asks, and
  // kept there from then on.
  RootCaPublisher root_ca(&api, ca_pem);
  if (absl::Status st = root_ca.Start(); !st.ok()) {
    std::cerr << "localkube: " << st.message() << "\n";
    return 1;
  }
  // The default `local-path` and the `shared-path` StorageClasses, their provisioner and the
  // PV/PVC controllers.
  PersistentVolumeOptions pv_options{options->data_dir};
  if (pv_options.data_dir.empty()) {
    pv_options.data_dir =
        (std::filesystem::temp_directory_path() / absl::StrCat("localkube-data-", getpid()))
            .string();
    scratch.push_back(pv_options.data_dir);
  }
  PersistentVolumeController volumes(&api, pv_options);
  if (absl::Status st = volumes.Start(); !st.ok()) {
    std::cerr << "localkube: " << st.message() << "\n";
    return 1;
  }
  Server server(s, &api, kubelet.get());
  if (absl::Status st = server.Start(); !st.ok()) {
    std::cerr << "localkube: " << st.message() << "\n";
    return 1;
  }
  if (kubelet) kubelet->SetApiServer("127.0.0.1", server.port());
  if (scheduler) {  // volume binding takes part in scheduling (scheduler_plugins.h)
    scheduler->AddFilter(VolumeBindingFilter(&store));
    scheduler->AddFilter(VolumeRestrictionsFilter(&store));
    scheduler->AddPreBind(volumes.PreBind());
  }
  if (nodes) {
    // A node's InternalIP is its bridge's address when pods run in sandboxes.
    if (PodNetwork* net = kubelet ? kubelet->pod_network() : nullptr) {
      std::vector<std::string> names = nodes->names();
      for (int i = 0; i < net->nodes() && i < static_cast<int>(names.size()); ++i) {
        (void)nodes->SetInternalIP(names[i], net->node_gateway(i));
      }
    }
    if (absl::Status st = nodes->Start(); !st.ok()) {
      std::cerr << "localkube: " << st.message() << "\n";
      return 1;
    }
  }
  if (scheduler) scheduler->Start();
  if (kubelet) kubelet->Start();
  if (workloads) workloads->Start();
  node_lifecycle.Start();
  if (!options->kubeconfig_out.empty()) {
    if (absl::Status st =
            WriteKubeconfig(options->kubeconfig_out, server.address(), s.token, ca_pem);
        !st.ok()) {
      std::cerr << "localkube: " << st.message() << "\n";
      return 1;
    }
  }
  if (!options->address_file.empty()) {
    std::ofstream tmp(options->address_file + ".tmp");
    tmp << server.address() << "\n";
    tmp.close();
    std::rename((options->address_file + ".tmp").c_str(), options->address_file.c_str());
  }
  std::cout << "localkube listening on " << server.address() << std::endl;
  log::Info("Started localkube", {{"address", server.address()}, {"run_pods", options->run_pods}});
  int sig = 0;
  sigwait(&stop, &sig);
  log::Info("Stopping localkube", {{"signal", sig}});
  {
    // Each part stops on a thread of its own: stopping is mostly waiting (a loop's next wake-up,
    // pods' processes reaped, the pod network removed), so together they take the longest one's
    // time rather than the sum, within the 2 s a program has after SIGTERM.
    std::vector<std::thread> stopping;
    if (workloads) stopping.emplace_back([&] { workloads->Stop(); });
    stopping.emplace_back([&] { node_lifecycle.Stop(); });
    stopping.emplace_back([&] { root_ca.Stop(); });
    stopping.emplace_back([&] { volumes.Stop(); });
    if (scheduler) stopping.emplace_back([&] { scheduler->Stop(); });
    if (nodes) stopping.emplace_back([&] { nodes->Stop(); });
    if (kubelet) stopping.emplace_back([&] { kubelet->Stop(); });  // kills every pod's processes
    for (std::thread& t : stopping) t.join();
  }
  server.Stop();
  std::error_code ignored;
  for (const std::string& dir : scratch) std::filesystem::remove_all(dir, ignored);
#if !defined(KT_LEAK_CHECKED)
  // Every thread that writes has stopped and nothing lives on disk: the store's objects and
  // history are not freed one by one. At 20,000 objects (1.6 GB) that alone took past the 2 s a
  // program has after SIGTERM. Leak-checked builds tear down as usual, for LeakSanitizer.
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(0);
#endif
  return 0;
}

}  // namespace
}  // namespace kubetrain::localkube

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  return kubetrain::localkube::Run(argc, argv);
}
