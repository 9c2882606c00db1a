// Node registration and heartbeats (see node_agents.h).
#include "localkube/node_agents.h"

#include <sys/utsname.h>

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "common/status.h"
#include "localkube/quantity.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kLeaseNamespace[] = "kube-node-lease";
constexpr int kLeaseDurationSeconds = 40;

std::string Arch() {
  struct utsname u;
  if (uname(&u) != 0) return "amd64";
  std::string m = u.machine;
  if (m == "x86_64") return "amd64";
  if (m == "aarch64") return "arm64";
  return m;
}

std::string KernelRelease() {
  struct utsname u;
  return uname(&u) == 0 ? u.release : "";
}

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string OsImage() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "PRETTY_NAME=")) {
      std::string v = line.substr(strlen("PRETTY_NAME="));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "Linux";
}

// A resource name a node can have: the built-in ones or a domain-qualified extended resource.
bool ValidResourceName(const std::string& name) {
  if (name == "cpu" || name == "memory" || name == "pods" || name == "ephemeral-storage") {
    return true;
  }
  if (absl::StartsWith(name, "hugepages-")) return true;
  size_t slash = name.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < name.size() &&
         name.find('/', slash + 1) == std::string::npos && name.find('=') == std::string::npos;
}

// Splits `[NODE:]rest`; NODE must be one of node-1..node-count.
absl::Status SplitNode(const std::string& flag, const std::string& value, int count,
                       std::string* node, std::string* rest) {
  size_t colon = value.find(':');
  if (colon == std::string::npos) {
    node->clear();
    *rest = value;
    return absl::OkStatus();
  }
  *node = value.substr(0, colon);
  *rest = value.substr(colon + 1);
  int index = 0;
  if (!absl::StartsWith(*node, "node-") ||
      !absl::SimpleAtoi(node->substr(strlen("node-")), &index) || index < 1 || index > count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " \"", value, "\": \"", *node, "\" is not a node: --nodes ", count,
                     " makes node-1", count > 1 ? absl::StrCat(" .. node-", count) : "",
                     "; write NODE:KEY=VALUE,... or KEY=VALUE,... for every node"));
  }
  return absl::OkStatus();
}

// "k=v,k=v" into pairs; `what` names the pair in errors.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Pairs(const std::string& flag,
                                                                       const std::string& value,
                                                                       const std::string& rest,
                                                                       const std::string& example) {
  std::vector<std::pair<std::string, std::string>> out;
  for (absl::string_view item : absl::StrSplit(rest, ',')) {
    size_t eq = item.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " \"", value, "\": \"", item,
                                                     "\" is not KEY=VALUE; write e.g. ", example));
    }
    out.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> DefaultNodeCapacity() {
  return {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "110"}};
}

absl::StatusOr<std::vector<NodeSpec>> ParseNodeSpecs(int count,
                                                     const std::vector<std::string>& capacity,
                                                     const std::vector<std::string>& labels) {
  if (count < 1 || count > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nodes ", count, ": localkube runs 1 to 16 nodes; pick one in that range"));
  }
  std::vector<NodeSpec> nodes(count);
  for (int i = 0; i < count; ++i) {
    nodes[i].name = absl::StrCat("node-", i + 1);
    nodes[i].capacity = DefaultNodeCapacity();
    nodes[i].labels["topology.kubernetes.io/zone"] = absl::StrCat("zone-", i + 1);
  }
  // Values for every node first, then per node, whatever order the flags came in.
  for (bool per_node : {false, true}) {
    for (const std::string& value : capacity) {
      std::string node, rest;
      RETURN_IF_ERROR(SplitNode("node-capacity", value, count, &node, &rest));
      if (node.empty() == per_node) continue;
      ASSIGN_OR_RETURN(auto pairs,
                       Pairs("node-capacity", value, rest, "cpu=4,memory=16Gi,nvidia.com/gpu=1"));
      for (auto& [res, qty] : pairs) {
        if (!ValidResourceName(res)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--node-capacity \"", value, "\": unknown resource \"", res,
              "\"; use cpu, memory, pods, ephemeral-storage or an extended resource with a "
              "domain, like nvidia.com/gpu"));
        }
        absl::StatusOr<Quantity> q = ParseQuantity(qty);
        if (!q.ok() || q->negative || (res == "pods" && !q->IsInteger()) ||
            (res != "cpu" && res != "memory" && res != "ephemeral-storage" &&
             !absl::StartsWith(res, "hugepages-") && !q->IsInteger())) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--node-capacity \"", value, "\": ", res, "=", qty, " is not a ",
              res == "cpu" || res == "memory" ? "non-negative quantity (e.g. cpu=2, cpu=500m, "
                                                "memory=8Gi)"
                                              : "non-negative whole number (e.g. pods=110)",
              q.ok() ? "" : absl::StrCat(": ", q.status().message())));
        }
        for (NodeSpec& n : nodes) {
          if (node.empty() || n.name == node) n.capacity[res] = q->String();
        }
      }
    }
    for (const std::string& value : labels) {
      std::string node, rest;
      RETURN_IF_ERROR(SplitNode("node-labels", value, count, &node, &rest));
      if (node.empty() == per_node) continue;
      ASSIGN_OR_RETURN(auto pairs, Pairs("node-labels", value, rest, "node-2:gpu=a100,rack=r1"));
      for (auto& [key, v] : pairs) {
        if (key == "kubernetes.io/hostname") {
          return absl::InvalidArgumentError(
              absl::StrCat("--node-labels \"", value,
                           "\": kubernetes.io/hostname is the node's name; leave it out"));
        }
        for (NodeSpec& n : nodes) {
          if (node.empty() || n.name == node) n.labels[key] = v;
        }
      }
    }
  }
  return nodes;
}

json NodeAgents::NodeObject(const NodeSpec& spec, const std::string& internal_ip) {
  std::string arch = Arch();
  json labels = {{"beta.kubernetes.io/arch", arch},
                 {"beta.kubernetes.io/os", "linux"},
                 {"kubernetes.io/arch", arch},
                 {"kubernetes.io/hostname", spec.name},
                 {"kubernetes.io/os", "linux"}};
  for (const auto& [k, v] : spec.labels) labels[k] = v;
  json capacity = json::object();
  for (const auto& [k, v] : spec.capacity) capacity[k] = v;
  std::string machine = FirstLine("/etc/machine-id");
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", spec.name},
            {"labels", labels},
            {"annotations",
             {{"node.alpha.kubernetes.io/ttl", "0"},
              {"volumes.kubernetes.io/controller-managed-attach-detach", "true"}}}}},
          {"spec", json::object()},
          {"status",
           {{"capacity", capacity},
            {"allocatable", capacity},
            {"conditions", json::array()},
            {"addresses",
             {{{"type", "InternalIP"}, {"address", internal_ip}},
              {{"type", "Hostname"}, {"address", spec.name}}}},
            {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
            {"nodeInfo",
             {{"machineID", machine},
              {"systemUUID", absl::StrCat(machine, "-", spec.name)},
              {"bootID", FirstLine("/proc/sys/kernel/random/boot_id")},
              {"kernelVersion", KernelRelease()},
              {"osImage", OsImage()},
              {"containerRuntimeVersion", "localkube://1.0.0"},
              {"kubeletVersion", "v1.33.1"},
              {"kubeProxyVersion", ""},
              {"operatingSystem", "linux"},
              {"architecture", arch}}},
            {"images", json::array()}}}};
}

NodeAgents::NodeAgents(NodeAgentsOptions options, Api* api)
    : options_(std::move(options)), api_(api) {
  for (const NodeSpec& n : options_.nodes) {
    internal_ip_[n.name] = options_.internal_ip ? options_.internal_ip(n.name) : "127.0.0.1";
  }
}

NodeAgents::~NodeAgents() { Stop(); }

std::vector<std::string> NodeAgents::names() const {
  std::vector<std::string> out;
  for (const NodeSpec& n : options_.nodes) out.push_back(n.name);
  return out;
}

absl::Status NodeAgents::Start() {
  absl::Time now = absl::Now();
  for (const NodeSpec& n : options_.nodes) {
    std::string ip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ip = internal_ip_[n.name];
    }
    // Registers the Node (the API server drops status on create; the first heartbeat posts it).
    json node = NodeObject(n, ip);
    ResourceTypePtr type = api_->registry()->Find("", "v1", "nodes");
    if (!type) return absl::InternalError("localkube serves no nodes");
    absl::StatusOr<json> created = api_->Create(Target{type, "", "", ""}, node, WriteOptions{});
    json status = node["status"];
    json labels = node["metadata"]["labels"];
    RETURN_IF_ERROR(api_->Mutate("/nodes", "", n.name, [&](json& live) {
      for (auto it = labels.begin(); it != labels.end(); ++it) {
        live["metadata"]["labels"][it.key()] = it.value();
      }
      json conditions = live.value("status", json::object()).value("conditions", json::array());
      live["status"] = status;
      live["status"]["conditions"] = conditions;
      return true;
    }));
    (void)created;
    Heartbeat(n.name, now);
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void NodeAgents::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status NodeAgents::SetDown(const std::string& name, bool down) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!internal_ip_.contains(name)) {
      return absl::NotFoundError(absl::StrCat("no node named \"", name, "\""));
    }
    if (down) {
      down_.insert(name);
      resumed_.erase(name);
    } else if (down_.erase(name) > 0) {
      resumed_.insert(name);
    }
  }
  log::Info(down ? "Node heartbeats stopped" : "Node heartbeats resumed", {{"node", name}});
  wake_.notify_all();
  return absl::OkStatus();
}

bool NodeAgents::IsDown(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return down_.contains(name);
}

absl::Status NodeAgents::SetInternalIP(const std::string& name, const std::string& ip) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!internal_ip_.contains(name)) {
      return absl::NotFoundError(absl::StrCat("no node named \"", name, "\""));
    }
    internal_ip_[name] = ip;
  }
  return api_->Mutate("/nodes", "", name, [&](json& live) {
    for (json& a : live["status"]["addresses"]) {
      if (a.value("type", "") == "InternalIP") a["address"] = ip;
    }
    return true;
  });
}

void NodeAgents::Loop() {
  absl::Time next = absl::Now() + options_.period;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock,
                   absl::ToChronoNanoseconds(std::max(next - absl::Now(), absl::ZeroDuration())),
                   [&] { return stop_ || !resumed_.empty() || absl::Now() >= next; });
    if (stop_) return;
    absl::Time now = absl::Now();
    std::vector<std::string> beat;
    if (now >= next) {
      for (const NodeSpec& n : options_.nodes) {
        if (!down_.contains(n.name)) beat.push_back(n.name);
      }
      resumed_.clear();
      next = now + options_.period;
    } else {
      beat.assign(resumed_.begin(), resumed_.end());
      resumed_.clear();
    }
    lock.unlock();
    for (const std::string& name : beat) Heartbeat(name, now);
    lock.lock();
  }
}

void NodeAgents::Heartbeat(const std::string& name, absl::Time now) {
  std::string micro = KubeMicroTime(now);
  std::string seconds = KubeTime(now);
  std::string ip;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ip = internal_ip_[name];
  }
  // The kubelet's view of its node, posted with every heartbeat.
  struct Condition {
    const char *type, *status, *reason, *message;
  };
  static constexpr Condition kConditions[] = {
      {"MemoryPressure", "False", "KubeletHasSufficientMemory",
       "kubelet has sufficient memory available"},
      {"DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
      {"PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
      {"Ready", "True", "KubeletReady", "kubelet is posting ready status"},
  };
  absl::Status node_status = api_->Mutate("/nodes", "", name, [&](json& live) {
    json old = live["status"].value("conditions", json::array());
    json conditions = json::array();
    for (const Condition& c : kConditions) {
      std::string transition = seconds;
      for (const json& o : old) {
        if (o.value("type", "") == c.type && o.value("status", "") == c.status) {
          transition = o.value("lastTransitionTime", seconds);
        }
      }
      conditions.push_back({{"type", c.type},
                            {"status", c.status},
                            {"lastHeartbeatTime", seconds},
                            {"lastTransitionTime", transition},
                            {"reason", c.reason},
                            {"message", c.message}});
    }
    live["status"]["conditions"] = conditions;
    for (json& a : live["status"]["addresses"]) {
      if (a.value("type", "") == "InternalIP") a["address"] = ip;
    }
    return true;
  });
  if (absl::IsNotFound(node_status)) {
    // Deleted from under us: a kubelet registers its node again.
    for (const NodeSpec& n : options_.nodes) {
      if (n.name != name) continue;
      ResourceTypePtr type = api_->registry()->Find("", "v1", "nodes");
      if (type) (void)api_->Create(Target{type, "", "", ""}, NodeObject(n, ip), {});
    }
    return;
  }
  absl::Status lease =
      api_->Mutate("coordination.k8s.io/leases", kLeaseNamespace, name, [&](json& live) {
        live["spec"]["renewTime"] = micro;
        live["spec"]["holderIdentity"] = name;
        live["spec"]["leaseDurationSeconds"] = kLeaseDurationSeconds;
        return true;
      });
  if (absl::IsNotFound(lease)) {
    ResourceTypePtr type = api_->registry()->Find("coordination.k8s.io", "v1", "leases");
    auto node = api_->store()->Get("/nodes", "", name);
    if (!type || !node) return;
    json object = {{"apiVersion", "coordination.k8s.io/v1"},
                   {"kind", "Lease"},
                   {"metadata",
                    {{"name", name},
                     {"namespace", kLeaseNamespace},
                     {"ownerReferences",
                      {{{"apiVersion", "v1"},
                        {"kind", "Node"},
                        {"name", name},
                        {"uid", (*node)["metadata"].value("uid", "")}}}}}},
                   {"spec",
                    {{"holderIdentity", name},
                     {"leaseDurationSeconds", kLeaseDurationSeconds},
                     {"renewTime", micro}}}};
    absl::StatusOr<json> created =
        api_->Create(Target{type, kLeaseNamespace, "", ""}, object, WriteOptions{});
    if (!created.ok()) {
      log::Warn("Cannot create node Lease",
                {{"node", name}, {"error", std::string(created.status().message())}});
    }
  }
}

}  // namespace kubetrain::localkube
