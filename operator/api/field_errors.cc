#include "operator/api/field_errors.h"

#include "absl/strings/str_cat.h"

namespace kubetrain::api {

absl::Status ToStatus(const FieldErrors& errors, absl::string_view what) {
  if (errors.empty()) return absl::OkStatus();
  std::string message = absl::StrCat(what, " is invalid (", errors.size(),
                                     errors.size() == 1 ? " problem):" : " problems):");
  for (const FieldError& e : errors) absl::StrAppend(&message, "\n  ", e.ToString());
  return absl::InvalidArgumentError(message);
}

}  // namespace kubetrain::api
