// Status helpers over absl::Status: early-return macros that can add context to an error.
//
//   RETURN_IF_ERROR(WriteFile(path));
//   RETURN_IF_ERROR(WriteFile(path), "writing checkpoint ", path);
//   ASSIGN_OR_RETURN(Config config, LoadConfig(path), "loading ", path);
//
// Context is prepended as "context: message" and the code is kept, so a caller still decides
// what to do by the code (UNAVAILABLE retry, INVALID_ARGUMENT report, ...).
#pragma once

#include <utility>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace kubetrain {

// Returns `status` with "context: " in front of its message; OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

namespace internal {

inline absl::Status WithContext(absl::Status status) { return status; }

template <typename... Parts>
absl::Status WithContext(absl::Status status, const Parts&... parts) {
  return Annotate(status, absl::StrCat(parts...));
}

}  // namespace internal
}  // namespace kubetrain

#define KT_STATUS_CONCAT_INNER(a, b) a##b
#define KT_STATUS_CONCAT(a, b) KT_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr, ...)                                                                 \
  do {                                                                                             \
    ::absl::Status kt_status_ = (expr);                                                            \
    if (!kt_status_.ok()) {                                                                        \
      return ::kubetrain::internal::WithContext(std::move(kt_status_) __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                                              \
  } while (false)

#define ASSIGN_OR_RETURN(lhs, expr, ...) \
  KT_ASSIGN_OR_RETURN_IMPL(KT_STATUS_CONCAT(kt_statusor_, __LINE__), lhs, expr, __VA_ARGS__)

#define KT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr, ...)                                              \
  auto tmp = (expr);                                                                               \
  if (!tmp.ok()) {                                                                                 \
    return ::kubetrain::internal::WithContext(std::move(tmp).status() __VA_OPT__(, ) __VA_ARGS__); \
  }                                                                                                \
  lhs = std::move(tmp).value()
