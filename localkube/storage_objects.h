// The storage kinds as the API server serves them: StorageClass (storage.k8s.io/v1),
// PersistentVolume and PersistentVolumeClaim (v1). Their defaults, the admission a real API
// server runs on them (DefaultStorageClass, the kubernetes.io/pvc-protection and
// kubernetes.io/pv-protection finalizers, the required claim fields) and the table columns
// `kubectl get storageclass,pv,pvc` prints. The controllers that act on them are in
// persistent_volumes.h. Pure functions over their arguments; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "localkube/resources.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

inline constexpr char kPvcKey[] = "/persistentvolumeclaims";
inline constexpr char kPvKey[] = "/persistentvolumes";
inline constexpr char kStorageClassKey[] = "storage.k8s.io/storageclasses";

inline constexpr char kDefaultClassAnnotation[] = "storageclass.kubernetes.io/is-default-class";
inline constexpr char kSelectedNodeAnnotation[] = "volume.kubernetes.io/selected-node";
inline constexpr char kPvcProtectionFinalizer[] = "kubernetes.io/pvc-protection";
inline constexpr char kPvProtectionFinalizer[] = "kubernetes.io/pv-protection";

// Defaults of a new StorageClass: reclaimPolicy Delete, volumeBindingMode Immediate.
void StorageClassDefaults(nlohmann::json& object);
// Of a new PersistentVolume: persistentVolumeReclaimPolicy Retain, volumeMode Filesystem,
// status.phase Pending, and the pv-protection finalizer.
void PersistentVolumeDefaults(nlohmann::json& object);
// Of a new PersistentVolumeClaim: volumeMode Filesystem, status.phase Pending, and the
// pvc-protection finalizer.
void PersistentVolumeClaimDefaults(nlohmann::json& object);

// A claim's create: spec.accessModes and spec.resources.requests.storage are required (422 as
// the API server words it), and DefaultStorageClass gives a claim without spec.storageClassName
// the default class (the newest of those annotated is-default-class "true"; none: left unset).
absl::Status AdmitPersistentVolumeClaim(const Store& store, nlohmann::json* claim,
                                        const nlohmann::json* old);

// The default StorageClass's name, "" when none is marked.
std::string DefaultStorageClassName(const Store& store);

// object[key] when it is an object, else an empty object.
const nlohmann::json& ObjectOrEmpty(const nlohmann::json& object, const char* key);
// A claim's storage class name ("" for none), the beta annotation first as the API reads it.
std::string ClaimClassName(const nlohmann::json& claim);
// A pod in phase Succeeded or Failed: it no longer uses its volumes.
bool PodFinished(const nlohmann::json& pod);

// "RWO,ROX,RWX,RWOP" for the access modes a list names, in that order (kubectl's form).
std::string AccessModesString(const nlohmann::json& modes);

// The columns (and one row's cells) of `kubectl get` for the three kinds; nullopt / null for
// any other kind.
std::optional<std::vector<PrinterColumn>> StorageTableColumns(const ResourceType& type);
nlohmann::json StorageTableCells(const ResourceType& type, const nlohmann::json& object,
                                 const std::string& age);

}  // namespace kubetrain::localkube
