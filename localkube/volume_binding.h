// The scheduler's volume plug-ins for localkube's scheduler (scheduler_plugins.h), as
// kube-scheduler's VolumeBinding and VolumeRestrictions plug-ins decide:
//  - VolumeBindingFilter: every persistentVolumeClaim volume of the pod names a claim that
//    exists (`persistentvolumeclaim "x" not found`) and is not being deleted
//    (`persistentvolumeclaim "x" is being deleted`); a bound claim's PersistentVolume exists
//    ("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)") and its
//    spec.nodeAffinity admits the node ("node(s) had volume node affinity conflict"); an unbound
//    claim is of a WaitForFirstConsumer class ("pod has unbound immediate
//    PersistentVolumeClaims"), whose class exists (`storageclass.storage.k8s.io "x" not found`)
//    and whose volume.kubernetes.io/selected-node, once set, is this node ("node(s) didn't find
//    available persistent volumes to bind").
//  - VolumeRestrictionsFilter: a ReadWriteOncePod claim used by another pod that is scheduled
//    and not finished fits no node ("node has pod using PersistentVolumeClaim with the same name
//    and ReadWriteOncePod access mode").
// The pre-bind half (selected-node, then provisioning) is PersistentVolumeController::PreBind.
// Filters read the Store only; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "localkube/scheduler_plugins.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

SchedulerFilter VolumeBindingFilter(const Store* store);
SchedulerFilter VolumeRestrictionsFilter(const Store* store);

// Whether `node` (a Node object: labels and metadata.name) satisfies a
// spec.nodeAffinity.required of a PersistentVolume (its nodeSelectorTerms ORed, each term's
// matchExpressions and matchFields ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt). A PV without
// node affinity fits every node.
bool VolumeNodeAffinityMatches(const nlohmann::json& pv, const nlohmann::json& node);

// The Node object `name` from the store, or, where no Node object exists (a kubelet without
// Node objects), the one the node conventions give it: label kubernetes.io/hostname = name.
nlohmann::json NodeOrConvention(const Store& store, const std::string& name);

// The claim names of a pod's persistentVolumeClaim volumes, in spec order.
std::vector<std::string> PodClaimNames(const nlohmann::json& pod);

}  // namespace kubetrain::localkube
