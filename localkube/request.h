// Reading a request and writing a reply the way the apiserver does: query parameters (Go's
// ParseBool, resourceVersion, list and write and delete options), API paths, content
// negotiation for Tables, and JSON/Status replies. Internal to the localkube library (includes
// httplib).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "localkube/api.h"

namespace kubetrain::localkube {

inline constexpr char kJson[] = "application/json";

// Go's strconv.ParseBool, which is what the apiserver uses for query booleans.
bool ParseBool(const std::string& v);
// A query parameter's value; "" when absent.
std::string Param(const httplib::Request& req, const char* name);
// An integer query parameter, read as the apiserver's query decoding does (strconv.ParseInt):
// `absent` when it is not given or empty, 400 naming it when it is not a number.
absl::StatusOr<int64_t> IntParam(const httplib::Request& req, const char* name, int64_t absent);

void Reply(httplib::Response& res, int code, const nlohmann::json& body);
// The Status body of `status`, with its code.
void ReplyError(httplib::Response& res, const absl::Status& status);
// Whether the client asked for a Table (`Accept: ...;as=Table;...`).
bool WantsTable(const httplib::Request& req);

// "/api/v1/..." or "/apis/<group>/<version>/...": the group, version and the segments after.
struct ParsedPath {
  std::string group, version;
  std::vector<std::string> rest;
  bool ok = false;
};
ParsedPath SplitApiPath(const std::string& path);

WriteOptions WriteOptionsOf(const httplib::Request& req);
// The apiserver's versioner: strconv.ParseUint on anything but "" and "0" (400 otherwise).
absl::StatusOr<int64_t> ParseResourceVersion(const std::string& rv);
absl::StatusOr<ListOptions> ListOptionsOf(const httplib::Request& req);
// From the query and the body (JSON or protobuf DeleteOptions).
absl::StatusOr<DeleteOptions> DeleteOptionsOf(const httplib::Request& req);

}  // namespace kubetrain::localkube
