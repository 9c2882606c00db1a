// TrainingJob manifests for the controller's tests, unit (fakes) and live (localkube) alike.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kubetrain::controller::testing {

using nlohmann::json;

inline json Replica(int replicas, const std::string& policy = "") {
  json spec = {
      {"replicas", replicas},
      {"template",
       {{"spec",
         {{"containers",
           json::array({{{"name", "kubetrain"}, {"image", "kubetrain/worker:0.1.0"}}})}}}}}};
  if (!policy.empty()) spec["restartPolicy"] = policy;
  return spec;
}

inline json Job(const std::string& name, json replica_specs, json run_policy = json::object()) {
  return {{"apiVersion", "kubetrain.dev/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", {{"replicaSpecs", replica_specs}, {"runPolicy", run_policy}}}};
}

}  // namespace kubetrain::controller::testing
