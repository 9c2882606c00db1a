#include "operator/controller/managed_by.h"

#include "operator/api/types.h"

namespace kubetrain::controller {

std::optional<std::string> ManagedElsewhere(const nlohmann::json& job, bool tfjob) {
  const nlohmann::json::json_pointer path("/spec/runPolicy/managedBy");
  if (!job.is_object() || !job.contains(path)) return std::nullopt;
  const nlohmann::json& v = job.at(path);
  // A value that is not a string is the decoder's to report (InvalidSpec), as this operator's.
  if (!v.is_string()) return std::nullopt;
  const std::string manager = v.get<std::string>();
  if (api::ManagedByThisOperator(manager, tfjob)) return std::nullopt;
  // Not a domain-prefixed path: no controller's name, but a mistake validation reports.
  if (manager.find('/') == std::string::npos || manager.size() > api::kMaxManagedByLength) {
    return std::nullopt;
  }
  return manager;
}

}  // namespace kubetrain::controller
