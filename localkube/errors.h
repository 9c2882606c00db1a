// Kubernetes API errors carried inside absl::Status. The exact `Status` JSON the clients branch on
// (code, reason, details) rides as a payload, so every layer returns plain absl::Status and only
// the HTTP layer turns it into a response.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kubetrain::localkube {

// One `details.causes[]` entry of an Invalid error.
struct Cause {
  std::string reason;  // FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, ...
  std::string message;
  std::string field;
};

absl::Status ApiError(int http_code, absl::string_view reason, absl::string_view message,
                      nlohmann::json details = nullptr);

// "<resource>.<group>" names an object's collection in messages (`pods`, `trainingjobs.x.dev`).
absl::Status NotFoundError(absl::string_view qualified_resource, absl::string_view name);
absl::Status AlreadyExistsError(absl::string_view qualified_resource, absl::string_view name);
absl::Status ConflictError(absl::string_view qualified_resource, absl::string_view name);
absl::Status InvalidError(absl::string_view qualified_kind, absl::string_view name,
                          const std::vector<Cause>& causes);
absl::Status BadRequestError(absl::string_view message);
absl::Status GoneError(absl::string_view message);
// 410 Expired for a continue token whose revision was compacted away, as the apiserver's etcd3
// storage answers it: the message offers `continue_token` (metadata.continue of the Status),
// which goes on from the same key at the latest revision.
absl::Status ExpiredContinueError(const std::string& continue_token);
// 504 Timeout for a read at a resourceVersion the store has not reached (cause
// ResourceVersionTooLarge, retry after 1 s), as the watch cache answers after waiting 3 s.
absl::Status TooLargeResourceVersionError(int64_t requested, int64_t current);

// utilerrors.NewAggregate(errs).Error(): one message alone, several deduplicated (first
// occurrence kept) in brackets, separated by ", ".
std::string AggregateMessage(const std::vector<std::string>& errors);

// The Status object for an error (synthesised from the absl code when there is no payload).
nlohmann::json StatusBody(const absl::Status& status);
int HttpCode(const absl::Status& status);

// Success Status returned by deletes of objects that are gone at once.
nlohmann::json SuccessStatus(const nlohmann::json& details);

// The Success Status (code 201) that a POST to a pod's binding or eviction subresource answers:
// it creates no object of its own.
nlohmann::json CreatedStatus();

}  // namespace kubetrain::localkube
