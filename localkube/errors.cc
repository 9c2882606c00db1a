#include "localkube/errors.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kubetrain::localkube {
namespace {

constexpr char kPayloadUrl[] = "type.kubetrain.dev/localkube.Status";

// The absl code an ApiError carries inside localkube. The wire gets the payload's HTTP code and
// reason, exactly as kube-apiserver sends them (docs/architecture.md §6, decision 0004). Kept
// apart from kube::Client's table (operator/kube/client.cc) on purpose: this side is the server's
// wire contract, that one a client's interpretation of it (what its caller should do, §2); one
// shared table would let the test server bend to the client it tests. So codes keep the server's
// meaning, as google.rpc pairs them with HTTP:
// - 429 TooManyRequests is RESOURCE_EXHAUSTED: a limit of the server ran out (clients retry
//   after Retry-After).
// - 415 UnsupportedMediaType is INVALID_ARGUMENT, as 400 and 422: the request's body is in a
//   format this server does not take.
absl::StatusCode CodeFor(int http_code) {
  switch (http_code) {
    case 400:
    case 415:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return absl::StatusCode::kInternal;
  }
}

// Splits "pods" / "trainingjobs.kubetrain.dev" into the details' kind and group.
nlohmann::json DetailsFor(absl::string_view qualified, absl::string_view name) {
  std::string q(qualified);
  size_t dot = q.find('.');
  nlohmann::json details = {{"name", std::string(name)}};
  if (dot == std::string::npos) {
    details["kind"] = q;
  } else {
    details["kind"] = q.substr(0, dot);
    details["group"] = q.substr(dot + 1);
  }
  return details;
}

}  // namespace

absl::Status ApiError(int http_code, absl::string_view reason, absl::string_view message,
                      nlohmann::json details) {
  nlohmann::json body = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", {}},
                         {"status", "Failure"}, {"message", message}, {"reason", reason},
                         {"code", http_code}};
  body["metadata"] = nlohmann::json::object();
  if (!details.is_null()) body["details"] = std::move(details);
  absl::Status status(CodeFor(http_code), message);
  // A message may quote the bytes of a body that is not UTF-8: replaced (U+FFFD), never thrown.
  status.SetPayload(
      kPayloadUrl, absl::Cord(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  return status;
}

absl::Status NotFoundError(absl::string_view qualified_resource, absl::string_view name) {
  return ApiError(404, "NotFound", absl::StrCat(qualified_resource, " \"", name, "\" not found"),
                  DetailsFor(qualified_resource, name));
}

absl::Status AlreadyExistsError(absl::string_view qualified_resource, absl::string_view name) {
  return ApiError(409, "AlreadyExists",
                  absl::StrCat(qualified_resource, " \"", name, "\" already exists"),
                  DetailsFor(qualified_resource, name));
}

absl::Status ConflictError(absl::string_view qualified_resource, absl::string_view name) {
  return ApiError(409, "Conflict",
                  absl::StrCat("Operation cannot be fulfilled on ", qualified_resource, " \"", name,
                               "\": the object has been modified; please apply your changes to "
                               "the latest version and try again"),
                  DetailsFor(qualified_resource, name));
}

absl::Status InvalidError(absl::string_view qualified_kind, absl::string_view name,
                          const std::vector<Cause>& causes) {
  nlohmann::json details = DetailsFor(qualified_kind, name);
  details["causes"] = nlohmann::json::array();
  std::vector<std::string> parts;
  for (const Cause& c : causes) {
    details["causes"].push_back({{"reason", c.reason}, {"message", c.message}, {"field", c.field}});
    parts.push_back(c.field.empty() ? c.message : absl::StrCat(c.field, ": ", c.message));
  }
  std::string joined = absl::StrJoin(parts, ", ");
  if (parts.size() > 1) joined = absl::StrCat("[", joined, "]");
  return ApiError(422, "Invalid",
                  absl::StrCat(qualified_kind, " \"", name, "\" is invalid: ", joined), details);
}

absl::Status BadRequestError(absl::string_view message) {
  return ApiError(400, "BadRequest", message);
}

absl::Status GoneError(absl::string_view message) { return ApiError(410, "Expired", message); }

absl::Status ExpiredContinueError(const std::string& continue_token) {
  absl::Status status = ApiError(
      410, "Expired",
      "The provided continue parameter is too old to display a consistent list result. You can "
      "start a new list without the continue parameter, or use the continue token in this "
      "response to retrieve the remainder of the results. Continuing with the provided token "
      "results in an inconsistent list - objects that were created, modified, or deleted "
      "between the time the first chunk was returned and now may show up in the list.");
  nlohmann::json body = StatusBody(status);
  body["metadata"]["continue"] = continue_token;
  status.SetPayload(kPayloadUrl, absl::Cord(body.dump()));
  return status;
}

absl::Status TooLargeResourceVersionError(int64_t requested, int64_t current) {
  return ApiError(
      504, "Timeout",
      absl::StrCat("Timeout: Too large resource version: ", requested, ", current: ", current),
      {{"causes",
        {{{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}}},
       {"retryAfterSeconds", 1}});
}

std::string AggregateMessage(const std::vector<std::string>& errors) {
  std::vector<std::string> unique;
  for (const std::string& e : errors) {
    if (std::find(unique.begin(), unique.end(), e) == unique.end()) unique.push_back(e);
  }
  if (unique.size() == 1) return unique[0];
  return absl::StrCat("[", absl::StrJoin(unique, ", "), "]");
}

nlohmann::json StatusBody(const absl::Status& status) {
  if (auto payload = status.GetPayload(kPayloadUrl)) {
    return nlohmann::json::parse(std::string(*payload));
  }
  int code = 500;
  std::string reason = "InternalError";
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      code = 404, reason = "NotFound";
      break;
    case absl::StatusCode::kInvalidArgument:
      code = 400, reason = "BadRequest";
      break;
    case absl::StatusCode::kAlreadyExists:
      code = 409, reason = "AlreadyExists";
      break;
    case absl::StatusCode::kAborted:
      code = 409, reason = "Conflict";
      break;
    default:
      break;
  }
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", nlohmann::json::object()},
          {"status", "Failure"},
          {"message", std::string(status.message())},
          {"reason", reason},
          {"code", code}};
}

int HttpCode(const absl::Status& status) { return StatusBody(status).value("code", 500); }

nlohmann::json SuccessStatus(const nlohmann::json& details) {
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", nlohmann::json::object()},
          {"status", "Success"},
          {"details", details}};
}

nlohmann::json CreatedStatus() {
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", nlohmann::json::object()},
          {"status", "Success"},
          {"code", 201}};
}

}  // namespace kubetrain::localkube
