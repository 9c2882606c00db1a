// Pod volumes as a kubelet materializes them on its node: each volume of a pod becomes a
// directory under the pod's own directory, <pod dir>/volumes/kubernetes.io~<plugin>/<name>
// (the kubelet's /var/lib/kubelet/pods/<uid>/volumes layout), filled from the API objects it
// names:
//  - emptyDir: an empty directory (mode 0777);
//  - secret, configMap: one file per key, or per `items` entry (key -> path, mode), with
//    `defaultMode` (0644 when unset); binaryData and Secret data are decoded;
//  - downwardAPI: `items` of fieldRef (metadata.name, namespace, uid, labels, annotations and
//    single labels['k'] / annotations['k']), written in the kubelet's format (`k="v"` lines);
//  - projected: the union of its sources (serviceAccountToken, configMap, secret, downwardAPI)
//    in one directory, `defaultMode` applying to all;
//  - hostPath: the host path itself (DirectoryOrCreate / FileOrCreate honoured).
// Other volume types (persistentVolumeClaim, ...) get an empty directory.
//
// A source that is missing (no such ConfigMap/Secret or key, optional unset or false, a token
// the issuer refuses)
// is an error worded as the kubelet's FailedMount event ("MountVolume.SetUp failed for volume
// \"cfg\" : configmap \"x\" not found"); the kubelet keeps the pod in ContainerCreating and
// retries. Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// Issues a ServiceAccount token for a serviceAccountToken projection: the pod's namespace, its
// ServiceAccount, the projection's audience ("" = the API server's) and expirationSeconds.
using ServiceAccountTokenFunc = std::function<absl::StatusOr<std::string>(
    const std::string& ns, const std::string& service_account, const std::string& audience,
    int64_t expiration_seconds)>;

struct PodVolume {
  std::string host_path;   // the materialized directory (or hostPath's path)
  bool read_only = false;  // secret, configMap, downwardAPI and projected are always read-only
};

struct VolumeContext {
  const Store* store = nullptr;  // ConfigMaps and Secrets are read from here
  // Issues serviceAccountToken projections. Empty: their token files are left out (a token
  // that fails to be issued is a FailedMount).
  ServiceAccountTokenFunc token;
  std::string pod_ip;  // for status.podIP fieldRefs
};

// Writes every volume of `pod` under `pod_dir`/volumes and returns them by name. Safe to call
// again (a retry after a failure rewrites the files). On the first volume that cannot be set
// up, FailedPrecondition with the kubelet's FailedMount wording.
absl::StatusOr<std::map<std::string, PodVolume>> SetUpVolumes(const nlohmann::json& pod,
                                                              const std::string& pod_dir,
                                                              const VolumeContext& context);

// A downward API fieldRef's value ("" for a path it does not know): metadata.name, namespace,
// uid, labels, annotations (all, in the kubelet's `k="v"` lines), labels['k'],
// annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP.
std::string DownwardApiField(const nlohmann::json& pod, const std::string& path,
                             const std::string& pod_ip);

// A relative path inside a volume (items[].path, subPath): not empty, not absolute, no `..`
// element. InvalidArgument naming `field` otherwise.
absl::Status CheckRelativePath(const std::string& path, const std::string& field);

}  // namespace kubetrain::localkube
