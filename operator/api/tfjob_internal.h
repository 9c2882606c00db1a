// Internal to operator/api: how a TFJob's replica specs are read, shared by its conversion
// (tfjob.cc) and the objects made for it (tfjob_objects.cc).
#pragma once

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "operator/api/defaults.h"  // Containers
#include "operator/api/types.h"

namespace kubetrain::api::tfjob_internal {

// A tfReplicaSpecs key as Kubeflow's replica type ("worker" is Worker: keys ignore case, as its
// defaulting does); "" for a type Kubeflow does not know.
std::string CanonicalType(const std::string& key);

// The TFJob's replica specs by canonical type, each with the key it was written under.
using ReplicaSpecMap = std::map<std::string, std::pair<std::string, const nlohmann::json*>>;
ReplicaSpecMap ReplicaSpecs(const nlohmann::json& tfjob);

// The tfReplicaSpecs type (canonical) a TrainingJob replica type came from: its own name
// (api::Name), but Master for a Chief written as Master.
std::string CanonicalKey(const ReplicaSpecMap& specs, ReplicaType type);

}  // namespace kubetrain::api::tfjob_internal
