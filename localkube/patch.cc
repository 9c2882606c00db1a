#include "localkube/patch.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "localkube/errors.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr absl::string_view kSetOrder = "$setElementOrder/";
constexpr absl::string_view kDeleteFromList = "$deleteFromPrimitiveList/";

// Lists whose items are merged as a set of scalars rather than replaced.
bool IsPrimitiveMergeList(absl::string_view field) { return field == "finalizers"; }

// Removes "$..." directive keys from a value that is added rather than merged.
json StripDirectives(json value) {
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end();) {
      if (absl::StartsWith(it.key(), "$")) {
        it = value.erase(it);
      } else {
        it.value() = StripDirectives(it.value());
        ++it;
      }
    }
  } else if (value.is_array()) {
    json out = json::array();
    for (auto& v : value) {
      if (v.is_object() && v.contains("$patch")) continue;
      out.push_back(StripDirectives(v));
    }
    return out;
  }
  return value;
}

bool SameKey(const json& a, const json& b, const std::string& key) {
  return a.is_object() && b.is_object() && a.contains(key) && b.contains(key) && a[key] == b[key];
}

json MergeMap(json target, const json& patch, bool strategic);

// Orders `list` so elements named in `order` (by merge key) come first in that order.
json ApplyOrder(const json& list, const json& order, const std::string& key) {
  if (!order.is_array() || key.empty()) return list;
  json out = json::array();
  std::vector<bool> used(list.size(), false);
  for (const auto& o : order) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (!used[i] && SameKey(list[i], o, key)) {
        out.push_back(list[i]);
        used[i] = true;
      }
    }
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (!used[i]) out.push_back(list[i]);
  }
  return out;
}

json MergeList(const std::string& field, const json& target, const json& patch, bool strategic) {
  if (IsPrimitiveMergeList(field)) {
    json out = target.is_array() ? target : json::array();
    for (const auto& v : patch) {
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    return out;
  }
  std::string key = MergeKeyFor(field, patch.empty() ? target : patch);
  if (key.empty() || !target.is_array()) return StripDirectives(patch);
  if (strategic) {
    for (const auto& p : patch) {
      if (p.is_object() && p.value("$patch", "") == "replace") return StripDirectives(patch);
    }
  }
  json out = target;
  for (const auto& p : patch) {
    if (!p.is_object() || !p.contains(key)) continue;
    auto it =
        std::find_if(out.begin(), out.end(), [&](const json& t) { return SameKey(t, p, key); });
    if (strategic && p.value("$patch", "") == "delete") {
      if (it != out.end()) out.erase(it);
    } else if (it != out.end()) {
      *it = MergeMap(*it, p, strategic);
    } else {
      out.push_back(StripDirectives(p));
    }
  }
  return out;
}

// Merges `patch` into the object `target`. Returns null when the patch asks to delete it.
json MergeMap(json target, const json& patch, bool strategic) {
  if (!target.is_object()) target = json::object();
  if (strategic && patch.contains("$patch")) {
    std::string directive = patch["$patch"];
    if (directive == "replace") return StripDirectives(patch);
    if (directive == "delete") return nullptr;
  }
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string& key = it.key();
    if (strategic && absl::StartsWith(key, "$")) {
      if (absl::StartsWith(key, kDeleteFromList)) {
        std::string field = key.substr(kDeleteFromList.size());
        if (target.contains(field) && target[field].is_array()) {
          json kept = json::array();
          for (const auto& v : target[field]) {
            if (std::find(it->begin(), it->end(), v) == it->end()) kept.push_back(v);
          }
          target[field] = kept;
        }
      }
      continue;
    }
    const json& value = it.value();
    if (value.is_null()) {
      target.erase(key);
    } else if (value.is_object()) {
      json merged = MergeMap(target.contains(key) ? target[key] : json::object(), value, strategic);
      if (merged.is_null()) {
        target.erase(key);
      } else {
        target[key] = std::move(merged);
      }
    } else if (value.is_array()) {
      target[key] = MergeList(key, target.contains(key) ? target[key] : json(), value, strategic);
    } else {
      target[key] = value;
    }
  }
  if (!strategic) return target;
  // Directives that act on the merged result.
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (absl::StartsWith(it.key(), kSetOrder)) {
      std::string field = it.key().substr(kSetOrder.size());
      if (target.contains(field) && target[field].is_array()) {
        target[field] = ApplyOrder(target[field], it.value(), MergeKeyFor(field, target[field]));
      }
    }
  }
  if (patch.contains("$retainKeys") && patch["$retainKeys"].is_array()) {
    const json& keep = patch["$retainKeys"];
    for (auto it = target.begin(); it != target.end();) {
      if (std::find(keep.begin(), keep.end(), it.key()) == keep.end()) {
        it = target.erase(it);
      } else {
        ++it;
      }
    }
  }
  return target;
}

}  // namespace

std::string MergeKeyFor(absl::string_view field, const json& elements) {
  static const std::map<std::string, std::string, std::less<>> kKeys = {
      {"containers", "name"},
      {"initContainers", "name"},
      {"ephemeralContainers", "name"},
      {"volumes", "name"},
      {"env", "name"},
      {"imagePullSecrets", "name"},
      {"volumeMounts", "mountPath"},
      {"volumeDevices", "devicePath"},
      {"hostAliases", "ip"},
      {"ownerReferences", "uid"},
      {"conditions", "type"},
      {"topologySpreadConstraints", "topologyKey"},
      {"containerStatuses", "name"},
  };
  if (field == "ports") {
    // Container ports merge by containerPort; Service ports by port.
    for (const auto& e : elements) {
      if (e.is_object() && e.contains("containerPort")) return "containerPort";
    }
    return "port";
  }
  auto it = kKeys.find(field);
  if (it == kKeys.end()) return "";
  // Only objects can be merged by key; a list of scalars with that name stays atomic.
  for (const auto& e : elements) {
    if (!e.is_object()) return "";
  }
  return it->second;
}

absl::StatusOr<json> ApplyMergePatch(const json& target, const json& patch) {
  json result = target;
  result.merge_patch(patch);
  return result;
}

absl::StatusOr<json> ApplyJsonPatch(const json& target, const json& patch) {
  if (!patch.is_array()) return BadRequestError("json patch must be an array of operations");
  try {
    return target.patch(patch);
  } catch (const json::exception& e) {
    return ApiError(422, "Invalid",
                    absl::StrCat("the server rejected our request due to an "
                                 "error in our request: ",
                                 e.what()));
  }
}

absl::StatusOr<json> ApplyStrategicMergePatch(const json& target, const json& patch) {
  if (!patch.is_object()) return BadRequestError("strategic merge patch must be a JSON object");
  json result = MergeMap(target, patch, /*strategic=*/true);
  if (result.is_null()) return BadRequestError("a patch may not delete the whole object");
  return result;
}

json MergeApplied(const json& live, const json& applied) {
  return MergeMap(live, applied, /*strategic=*/false);
}

}  // namespace kubetrain::localkube
