// Read-only accessors for a stored object's metadata, shared by the API's create/update paths
// (api.cc), lists (list.cc), deletion and garbage collection (gc.cc) and the per-kind hooks.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube {

// metadata, or an empty object when it is absent or not an object.
inline const nlohmann::json& Meta(const nlohmann::json& object) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  auto it = object.find("metadata");
  return it != object.end() && it->is_object() ? *it : kEmpty;
}

inline std::string NameOf(const nlohmann::json& o) { return Meta(o).value("name", ""); }
inline std::string NamespaceOf(const nlohmann::json& o) { return Meta(o).value("namespace", ""); }
inline std::string UidOf(const nlohmann::json& o) { return Meta(o).value("uid", ""); }

inline bool HasFinalizers(const nlohmann::json& o) {
  return Meta(o).contains("finalizers") && !Meta(o)["finalizers"].empty();
}

inline bool IsDeleting(const nlohmann::json& o) { return Meta(o).contains("deletionTimestamp"); }

}  // namespace kubetrain::localkube
