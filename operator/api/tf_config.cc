#include "operator/api/tf_config.h"

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

// Above any job the operator accepts; a larger index can only be a corrupt or hostile value.
constexpr int kMaxIndex = 1'000'000;

absl::Status Bad(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: ", field, ": ", problem));
}

absl::Status ParseCluster(const json& cluster, TfConfig* out) {
  if (!cluster.is_object()) return Bad("cluster", "must be an object of task type to addresses");
  for (const auto& [type, addresses] : cluster.items()) {
    if (!addresses.is_array()) {
      return Bad(absl::StrCat("cluster.", type), "must be a list of \"host:port\" strings");
    }
    std::vector<std::string>& list = out->cluster[type];
    for (size_t i = 0; i < addresses.size(); ++i) {
      std::string field = absl::StrCat("cluster.", type, "[", i, "]");
      if (!addresses[i].is_string()) return Bad(field, "must be a \"host:port\" string");
      std::string host;
      int port;
      absl::Status s = SplitHostPort(addresses[i].get<std::string>(), &host, &port);
      if (!s.ok()) return Bad(field, s.message());
      list.push_back(addresses[i].get<std::string>());
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTask(const json& task, TfConfig* out) {
  if (!task.is_object()) return Bad("task", "must be an object with type and index");
  if (!task.contains("type") || !task["type"].is_string()) {
    return Bad("task.type", "required string (chief, ps, worker or evaluator)");
  }
  out->task_type = task["type"].get<std::string>();
  if (task.contains("index")) {
    const json& index = task["index"];
    // Checked before narrowing: 4294967296 would otherwise wrap to 0 and make a second chief.
    if (!index.is_number_integer()) {
      return Bad("task.index",
                 absl::StrCat("must be a non-negative integer, got ",
                              index.dump(-1, ' ', false, json::error_handler_t::replace)));
    }
    if (index.is_number_unsigned() ? index.get<uint64_t>() > uint64_t{kMaxIndex}
                                   : index.get<int64_t>() > int64_t{kMaxIndex}) {
      return Bad("task.index", absl::StrCat("must be at most ", kMaxIndex, ", got ", index.dump()));
    }
    if (!index.is_number_unsigned() && index.get<int64_t>() < 0) {
      return Bad("task.index", absl::StrCat("must be >= 0, got ", index.dump()));
    }
    out->task_index = static_cast<int>(index.get<int64_t>());
  }
  if (out->task_type == "evaluator") return absl::OkStatus();
  auto it = out->cluster.find(out->task_type);
  if (it == out->cluster.end()) {
    return Bad("task.type", absl::StrCat("\"", out->task_type, "\" is not a key of cluster"));
  }
  if (static_cast<size_t>(out->task_index) >= it->second.size()) {
    return Bad("task.index", absl::StrCat(out->task_index, " is out of range, cluster.",
                                          out->task_type, " has ", it->second.size(), " entries"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TfConfig::ChiefType() const {
  if (cluster.count("chief")) return "chief";
  if (cluster.count("master")) return "master";
  return "worker";
}

bool TfConfig::IsChief() const { return task_type == ChiefType() && task_index == 0; }

std::string TfConfig::TaskAddress() const {
  const std::vector<std::string>& list = Addresses(task_type);
  if (task_index < 0 || static_cast<size_t>(task_index) >= list.size()) return "";
  return list[task_index];
}

const std::vector<std::string>& TfConfig::Addresses(absl::string_view type) const {
  static const std::vector<std::string> kEmpty;
  auto it = cluster.find(std::string(type));
  return it == cluster.end() ? kEmpty : it->second;
}

absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view text) {
  if (text.size() > kMaxTfConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: ", text.size(),
                                                   " bytes, more than the ", kMaxTfConfigBytes,
                                                   " a process environment can carry"));
  }
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("TF_CONFIG: not valid JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("TF_CONFIG: must be a JSON object");
  TfConfig config;
  if (!doc.contains("cluster")) return Bad("cluster", "required");
  if (absl::Status s = ParseCluster(doc["cluster"], &config); !s.ok()) return s;
  if (!doc.contains("task")) return Bad("task", "required");
  if (absl::Status s = ParseTask(doc["task"], &config); !s.ok()) return s;
  if (doc.contains("environment")) {
    if (!doc["environment"].is_string()) return Bad("environment", "must be a string");
    config.environment = doc["environment"].get<std::string>();
  }
  return config;
}

std::string ToJsonString(const TfConfig& config) {
  // Cluster keys sorted (std::map order), then task as {"type","index"} like TensorFlow's docs.
  nlohmann::ordered_json doc;
  doc["cluster"] = nlohmann::ordered_json::object();
  for (const auto& [type, addresses] : config.cluster) doc["cluster"][type] = addresses;
  doc["task"]["type"] = config.task_type;
  doc["task"]["index"] = config.task_index;
  if (!config.environment.empty()) doc["environment"] = config.environment;  // Kubeflow's order
  return doc.dump();
}

}  // namespace kubetrain::api
