#include "operator/controller/elastic_bounds.h"

#include "absl/strings/match.h"

namespace kubetrain::controller {

using nlohmann::json;

std::string ElasticBoundsAnnotation(const api::TrainingJob& job) {
  if (!job.spec.elastic || !job.spec.elastic->min_replicas || !job.spec.elastic->max_replicas) {
    return "";
  }
  return json{{"minReplicas", *job.spec.elastic->min_replicas},
              {"maxReplicas", *job.spec.elastic->max_replicas}}
      .dump();
}

std::optional<json> WithRememberedBounds(const json& object, const api::FieldErrors& errors) {
  if (errors.empty()) return std::nullopt;
  const json::json_pointer elastic("/spec/elastic");
  if (!object.contains(elastic) || !object.at(elastic).is_object()) return std::nullopt;
  for (const api::FieldError& e : errors) {
    if (!absl::StartsWith(e.path, "spec.elastic") &&
        !absl::StartsWith(e.path, "spec.replicaSpecs.Worker.replicas") &&
        e.path != "spec.backupWorkers") {
      return std::nullopt;
    }
  }
  const json annotations =
      object.value("metadata", json::object()).value("annotations", json::object());
  if (!annotations.is_object() || !annotations.contains(kElasticBoundsAnnotation) ||
      !annotations[kElasticBoundsAnnotation].is_string()) {
    return std::nullopt;
  }
  const json bounds =
      json::parse(annotations[kElasticBoundsAnnotation].get<std::string>(), nullptr, false);
  if (!bounds.is_object() || !bounds.contains("minReplicas") || !bounds.contains("maxReplicas") ||
      !bounds["minReplicas"].is_number_integer() || !bounds["maxReplicas"].is_number_integer()) {
    return std::nullopt;
  }
  json fixed = object;
  fixed["spec"]["elastic"]["minReplicas"] = bounds["minReplicas"];
  fixed["spec"]["elastic"]["maxReplicas"] = bounds["maxReplicas"];
  return fixed;
}

}  // namespace kubetrain::controller
