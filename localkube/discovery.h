// Legacy (unaggregated) discovery documents and the OpenAPI v3 documents kubectl and helm need
// before they apply anything. Pure functions of the Registry's current contents.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "localkube/resources.h"

namespace kubetrain::localkube {

nlohmann::json VersionInfo();
// GET /api. `server_address` is host:port.
nlohmann::json ApiVersions(const std::string& server_address);
// GET /apis.
nlohmann::json ApiGroupList(const Registry& registry);
// GET /apis/<group>; null when the group is not served.
nlohmann::json ApiGroup(const Registry& registry, const std::string& group);
// GET /api/v1 or /apis/<group>/<version>; null when not served.
nlohmann::json ResourceList(const Registry& registry, const std::string& group,
                            const std::string& version);

// GET /openapi/v3: one entry per group version, hashed by the registry generation.
nlohmann::json OpenApiRoot(const Registry& registry);
// GET /openapi/v3/api/v1 or /openapi/v3/apis/<group>/<version>; null when not served.
nlohmann::json OpenApiGroupVersion(const Registry& registry, const std::string& group,
                                   const std::string& version);

}  // namespace kubetrain::localkube
