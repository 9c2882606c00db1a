// Rendering: the exact tasks of a job and the Kubernetes objects that run them
// (docs/architecture.md §4). Pure functions of a defaulted, valid TrainingJob; shared by the
// operator and `kubetrain run`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/tf_config.h"
#include "operator/api/types.h"

namespace kubetrain::api {

// One process of a job: a pod under the operator, a child process under `kubetrain run`.
struct Task {
  ReplicaType type;
  int index = 0;
  std::string name;     // <job>-<type>-<index>: pod name and host name
  std::string address;  // host:port its peers dial
  bool chief = false;
  RestartPolicy restart_policy = RestartPolicy::kNever;
};

// How peers reach a task.
class AddressScheme {
 public:
  virtual ~AddressScheme() = default;
  virtual std::string Address(const TrainingJob& job, ReplicaType type, int index) const = 0;
};

// <job>-<type>-<i>.<job>.<namespace>.svc[.<domain>]:<port>: the pod's hostname under the job's
// headless Service. The port is the training container's port named "kubetrain".
class ClusterDnsAddresses : public AddressScheme {
 public:
  explicit ClusterDnsAddresses(std::string cluster_domain = "")
      : cluster_domain_(std::move(cluster_domain)) {}
  std::string Address(const TrainingJob& job, ReplicaType type, int index) const override;

 private:
  std::string cluster_domain_;
};

// host:port with a port per task chosen by the caller (free loopback ports for local runs).
class LoopbackAddresses : public AddressScheme {
 public:
  using PortFn = std::function<int(ReplicaType type, int index)>;
  LoopbackAddresses(PortFn port_of, std::string host = "127.0.0.1")
      : port_of_(std::move(port_of)), host_(std::move(host)) {}
  std::string Address(const TrainingJob& job, ReplicaType type, int index) const override;

 private:
  PortFn port_of_;
  std::string host_;
};

// The namespace objects go to: metadata.namespace, or "default".
std::string Namespace(const TrainingJob& job);
// The pod name / host name of a task.
std::string TaskName(const TrainingJob& job, ReplicaType type, int index);
// containerPort of the named port on the training container, or `fallback`.
int ContainerPort(const TrainingJob& job, ReplicaType type, const char* port_name, int fallback);
// The chief: Chief 0 if the job has a Chief, else Worker 0.
bool IsChief(const TrainingJob& job, ReplicaType type, int index);

// Every task, ordered Chief, PS, Worker, Evaluator and by index.
std::vector<Task> Tasks(const TrainingJob& job, const AddressScheme& addresses);

// TF_CONFIG for one task. Evaluators appear in `task` only, never in `cluster`.
TfConfig TfConfigFor(const TrainingJob& job, const AddressScheme& addresses, ReplicaType type,
                     int index);

// Sets a container's env entry ({"name": ..., "value" or "valueFrom": ...}), replacing one of
// the same name (the operator's value wins over the template's).
void SetContainerEnv(nlohmann::json* container, nlohmann::json entry);

// ownerReferences naming the job (its own apiVersion and kind) as controller, for the objects
// made for it; the job must have a uid.
nlohmann::json JobOwnerReferences(const TrainingJob& job);

// Labels on the pods and the Service of a job (selector labels plus managed-by).
std::map<std::string, std::string> JobLabels(const TrainingJob& job);

// The job's headless Service: name <job>, clusterIP None, publishNotReadyAddresses.
nlohmann::json BuildService(const TrainingJob& job);
// The Secret holding the job's shared secret (docs/decisions/0005-shared-secret-per-job.md):
// name <job>-job-secret, owned by the job, `token` = `secret`. Every container of the job reads
// it as KUBETRAIN_JOB_SECRET; the ps and the coordinator refuse calls without it.
std::string JobSecretName(const std::string& job_name);
std::string JobSecretName(const TrainingJob& job);
nlohmann::json BuildJobSecret(const TrainingJob& job, const std::string& secret);
// The pod of one task: the template plus names, labels, env (TF_CONFIG, ...), annotations.
nlohmann::json BuildPod(const TrainingJob& job, ReplicaType type, int index,
                        const AddressScheme& addresses);
// The Secret (with `secret`), the Service, spec.checkpoint's claim when the operator creates one,
// then every pod: what the operator creates for a job.
std::vector<nlohmann::json> RenderObjects(const TrainingJob& job, const AddressScheme& addresses,
                                          const std::string& secret);

}  // namespace kubetrain::api
