// kubetrain-operator: watches TrainingJobs and reconciles them into pods, a Service and status.
// Serves /metrics, /healthz and /readyz (ready once the caches have synced), and with
// --leader-elect runs the controller only while it holds the leader Lease.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flags.h"
#include "common/host_port.h"
#include "common/http_serve.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/program.h"
#include "common/status.h"
#include "operator/controller/controller.h"
#include "operator/kube/config.h"
#include "operator/kube/leader_election.h"

namespace kubetrain {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_signalled{false};  // a stop asked from outside, which must be quick
void OnSignal(int) {
  g_signalled.store(true);
  g_stop.store(true);
}

// Kubernetes sends SIGKILL after the grace period, and a stuck stop holds up a rollout: once a
// signal asks for a stop, cut the API calls still in flight after kCutCallsAfter and leave outright
// at kExitAfter, whatever is still running.
constexpr absl::Duration kCutCallsAfter = absl::Milliseconds(1000);
constexpr absl::Duration kExitAfter = absl::Milliseconds(1800);

class StopWatchdog {
 public:
  explicit StopWatchdog(kube::Client& client)
      : thread_([this, &client] {
          while (!g_signalled.load() && !done_.load()) absl::SleepFor(absl::Milliseconds(20));
          if (done_.load()) return;
          absl::Time asked = absl::Now();
          while (!done_.load() && absl::Now() - asked < kCutCallsAfter) {
            absl::SleepFor(absl::Milliseconds(10));
          }
          client.Shutdown();
          while (!done_.load() && absl::Now() - asked < kExitAfter) {
            absl::SleepFor(absl::Milliseconds(10));
          }
          if (done_.load()) return;
          log::Warn("Stopping took too long; exiting without waiting for the rest",
                    {{"waited", kExitAfter}});
          std::cerr.flush();
          _exit(0);
        }) {}
  ~StopWatchdog() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

struct Options {
  std::string kubeconfig;
  std::string context;
  std::string namespace_;
  double qps = 50;
  int burst = 100;
  int workers = 4;
  std::string metrics_address = "0.0.0.0:8080";
  std::string health_address = "0.0.0.0:8081";
  std::string bind_address;
  bool leader_elect = false;
  std::string leader_election_namespace;
  std::string leader_election_id = "kubetrain-operator";
  std::string gang_scheduler;
  std::string cluster_domain;
  bool tfjob = false;
  absl::Duration progress_interval = absl::Seconds(5);
  absl::Duration progress_write_interval = absl::Seconds(30);
  std::string log_level = "info";
};

// `address` with its host replaced by `bind` where it names none or a wildcard. Servers in a pod
// listen on the pod's own IP, as the training pods do (docs/architecture.md §4): on hosts that run
// several pods in one network namespace (localkube) a wildcard port is taken from all of them.
absl::StatusOr<std::string> OnBindAddress(const std::string& address, const std::string& bind) {
  std::string host;
  int port;
  RETURN_IF_ERROR(SplitListenAddress(address, &host, &port));
  if (bind.empty() || !(host == "0.0.0.0" || host == "::")) return address;
  return JoinHostPort(bind, port);
}

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  FlagSet f("kubetrain-operator",
            "Reconciles TrainingJob resources (kubetrain.dev/v1) into pods, a headless Service\n"
            "and status, through the Kubernetes API; with --tfjob, Kubeflow TFJobs too.");
  f.Add("kubeconfig", &o.kubeconfig, "kubeconfig file (default: in-cluster, then ~/.kube/config)",
        "KUBECONFIG");
  f.Add("context", &o.context, "kubeconfig context (default: current-context)");
  f.Add("namespace", &o.namespace_, "watch one namespace only (default: all)", "WATCH_NAMESPACE");
  f.Add("qps", &o.qps, "client-side API request rate limit");
  f.Add("burst", &o.burst, "client-side API request burst");
  f.Add("workers", &o.workers, "concurrent reconciles (one job is never reconciled twice at once)");
  f.Add("metrics-address", &o.metrics_address, "host:port of /metrics");
  f.Add("health-address", &o.health_address, "host:port of /healthz and /readyz");
  f.Add("bind-address", &o.bind_address,
        "host the metrics and health servers listen on where their address names none or every "
        "interface (\":8080\", \"0.0.0.0:8080\"); the chart passes the pod IP",
        "KUBETRAIN_BIND_ADDRESS");
  f.Add("leader-elect", &o.leader_elect, "run only while holding a coordination.k8s.io Lease");
  f.Add("leader-election-namespace", &o.leader_election_namespace,
        "namespace of the Lease (default: the kubeconfig's or pod's namespace)", "POD_NAMESPACE");
  f.Add("leader-election-id", &o.leader_election_id, "name of the Lease");
  f.Add("gang-scheduler", &o.gang_scheduler, "\"volcano\" creates a PodGroup per job");
  f.Add("cluster-domain", &o.cluster_domain,
        "DNS suffix after .svc in TF_CONFIG, e.g. cluster.local (Kubeflow's variable works too)",
        "CUSTOM_CLUSTER_DOMAIN");
  f.Add("tfjob", &o.tfjob,
        "also serve Kubeflow TFJobs (kubeflow.org/v1 tfjobs; needs their CRD, "
        "deploy/crd/kubeflow.org_tfjobs.yaml)",
        "KUBETRAIN_TFJOB");
  f.Add("progress-interval", &o.progress_interval, "how often the chief's progress is read");
  f.Add("progress-write-interval", &o.progress_write_interval,
        "least time between two progress updates of one job's status (a new epoch is written at "
        "once)");
  f.Add("log-level", &o.log_level, "debug, info, warn or error");
  ASSIGN_OR_RETURN(std::vector<std::string> rest, f.Parse(argc, argv));
  if (!rest.empty()) return absl::InvalidArgumentError("unexpected argument \"" + rest[0] + "\"");
  if (!o.gang_scheduler.empty() && o.gang_scheduler != "volcano") {
    return absl::InvalidArgumentError("--gang-scheduler: must be \"\" or \"volcano\", got \"" +
                                      o.gang_scheduler + "\"");
  }
  if (o.workers < 1) return absl::InvalidArgumentError("--workers: must be >= 1");
  if (o.progress_interval < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError("--progress-interval: must be >= 100ms");
  }
  if (o.progress_write_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--progress-write-interval: must be >= 0s");
  }
  RETURN_IF_ERROR(log::SetLevelFlag(o.log_level));
  ASSIGN_OR_RETURN(o.metrics_address, OnBindAddress(o.metrics_address, o.bind_address),
                   "--metrics-address");
  ASSIGN_OR_RETURN(o.health_address, OnBindAddress(o.health_address, o.bind_address),
                   "--health-address");
  return o;
}

std::string Identity() {
  char host[256] = "operator";
  gethostname(host, sizeof(host) - 1);
  return absl::StrFormat("%s_%08x", host, std::random_device{}());
}

absl::Status Main(int argc, char** argv) {
  ASSIGN_OR_RETURN(Options o, ParseFlags(argc, argv));
  ASSIGN_OR_RETURN(kube::ClusterConfig cluster, kube::LoadConfig(o.kubeconfig, o.context));
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> metrics_server,
                   MetricsServer::Start(o.metrics_address));
  controller::OperatorMetrics metrics(metrics_server->registry());
  kube::ClientOptions client_options;
  client_options.qps = o.qps;
  client_options.burst = o.burst;
  client_options.on_request = [&metrics](const std::string& verb, int code) {
    metrics.ApiRequest(verb, code);
  };
  ASSIGN_OR_RETURN(std::unique_ptr<kube::Client> client,
                   kube::Client::Create(cluster, client_options));
  StopWatchdog watchdog(*client);
  log::Info("Starting kubetrain-operator",
            {{"cluster", cluster.source},
             {"server", absl::StrCat(cluster.host, ":", cluster.port)},
             {"namespace", o.namespace_.empty() ? "(all)" : o.namespace_},
             {"leader_elect", o.leader_elect},
             {"tfjob", o.tfjob}});

  controller::ControllerOptions copts;
  copts.namespace_ = o.namespace_;
  copts.workers = o.workers;
  copts.tfjob = o.tfjob;
  copts.reconciler.cluster_domain = o.cluster_domain;
  copts.reconciler.gang_scheduler = o.gang_scheduler;
  copts.reconciler.progress_interval = o.progress_interval;
  copts.reconciler.progress_write_interval = o.progress_write_interval;
  controller::Controller controller(*client, copts, &metrics);

  absl::Status start_error;
  std::unique_ptr<kube::LeaderElector> elector;
  if (o.leader_elect) {
    kube::LeaderElectionOptions le;
    le.namespace_ =
        o.leader_election_namespace.empty() ? cluster.namespace_ : o.leader_election_namespace;
    le.name = o.leader_election_id;
    le.identity = Identity();
    kube::LeaderCallbacks callbacks;
    callbacks.on_started_leading = [&](const std::atomic<bool>& stop_leading) {
      absl::Status s = controller.Start(&stop_leading);
      if (!s.ok() && !absl::IsCancelled(s)) {
        start_error = s;
        g_stop = true;
      }
    };
    // Another replica may hold the lease any moment now: no write of this one may land after
    // that. Every API call in flight or to come fails at once; the process then exits non-zero
    // and comes back as a standby.
    callbacks.on_lost_leadership = [&] {
      g_stop = true;
      client->Shutdown();
    };
    callbacks.on_stopped_leading = [&] { controller.Stop(); };
    callbacks.on_new_leader = [](const std::string& id) {
      log::Info("Observed leader", {{"identity", id}});
    };
    elector = std::make_unique<kube::LeaderElector>(cluster, le, std::move(callbacks));
  }

  std::string health_host;
  int health_port;
  RETURN_IF_ERROR(SplitListenAddress(o.health_address, &health_host, &health_port),
                  "--health-address");
  httplib::Server health;
  health.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  // A standby is ready: it is doing its job, which is to wait. Only the replica that runs the
  // controller waits for its caches (else `helm --wait` with replicaCount > 1 never ends).
  health.Get("/readyz", [&controller, &elector](const httplib::Request&, httplib::Response& res) {
    if (elector && !elector->IsLeader()) {
      res.set_content("ok (standby)", "text/plain");
      return;
    }
    res.status = controller.Ready() ? 200 : 503;
    res.set_content(controller.Ready() ? "ok" : "caches not synced", "text/plain");
  });
  if (!health.bind_to_port(health_host, health_port)) {
    return absl::UnavailableError("--health-address: cannot listen on " + o.health_address);
  }
  std::thread health_thread = ServeInBackground(health);

  absl::Status result;
  if (elector) {
    result = elector->Run(g_stop);
    if (result.ok()) result = start_error;
  } else {
    result = controller.Start(&g_stop);
    if (absl::IsCancelled(result)) result = absl::OkStatus();
    while (result.ok() && !g_stop.load()) absl::SleepFor(absl::Milliseconds(50));
  }
  // Reconciles in progress finish first: a pass cut between deleting a failed pod and writing
  // the restart into status would lose that restart. The watchdog cuts them if they hang.
  controller.Stop();
  client->Shutdown();
  health.stop();
  health_thread.join();
  return result;
}

}  // namespace
}  // namespace kubetrain

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  struct sigaction sa = {};
  sa.sa_handler = kubetrain::OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  absl::Status s = kubetrain::Main(argc, argv);
  if (kubetrain::HelpRequested(s)) return 0;
  if (!s.ok()) {
    kubetrain::log::Error("kubetrain-operator stopped", {{"error", s}});
    std::cerr << "kubetrain-operator: " << s.message() << std::endl;
    return 1;
  }
  return 0;
}
