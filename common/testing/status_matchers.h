// Test support: gMock matchers for absl::Status and absl::StatusOr<T>, so that a failing
// assertion prints the status instead of "Value of: x.ok() Actual: false". Debian's abseil ships
// no absl/status/status_matchers.h, hence these.
//
//   EXPECT_THAT(store.Push(args), IsOk());
//   ASSERT_THAT(config, IsOk());  // a StatusOr<T>
//   EXPECT_THAT(Validate(job), StatusIs(absl::StatusCode::kInvalidArgument,
//   HasSubstr("replicas")));
//
// IsOk() also takes a status type shaped like grpc::Status (ok(), error_code(),
// error_message()); StatusIs() takes absl::Status and absl::StatusOr<T> only.
#pragma once

#include <concepts>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include <gmock/gmock.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::testing {
namespace status_matchers_internal {

// A status type that is not absl's but reads the same way: grpc::Status.
template <typename S>
concept ErrorCodeStatus = requires(const S& s) {
  { s.ok() } -> std::convertible_to<bool>;
  s.error_code();
  { s.error_message() } -> std::convertible_to<std::string>;
};

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

inline bool IsOkValue(const absl::Status& status) { return status.ok(); }

template <typename T>
bool IsOkValue(const absl::StatusOr<T>& status_or) {
  return status_or.ok();
}

template <ErrorCodeStatus S>
bool IsOkValue(const S& status) {
  return status.ok();
}

inline void PrintStatus(const absl::Status& status, std::ostream& os) { os << status; }

template <typename T>
void PrintStatus(const absl::StatusOr<T>& status_or, std::ostream& os) {
  os << status_or.status();
}

template <ErrorCodeStatus S>
void PrintStatus(const S& status, std::ostream& os) {
  os << "code " << static_cast<int>(status.error_code()) << ": " << status.error_message();
}

class IsOkMatcher {
 public:
  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    if (IsOkValue(value)) return true;
    if (listener->stream() != nullptr) {
      *listener << "whose status is ";
      PrintStatus(value, *listener->stream());
    }
    return false;
  }

  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code,
                  std::optional<::testing::Matcher<const std::string&>> message)
      : code_(code), message_(std::move(message)) {}

  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(value);
    *listener << "whose status is " << status;
    if (status.code() != code_) return false;
    if (!message_.has_value()) return true;
    ::testing::StringMatchResultListener inner;
    const bool matched = message_->MatchAndExplain(std::string(status.message()), &inner);
    if (!inner.str().empty()) *listener << ", and whose message " << inner.str();
    return matched;
  }

  void DescribeTo(std::ostream* os) const {
    *os << "has status code " << absl::StatusCodeToString(code_);
    if (message_.has_value()) {
      *os << " and a message that ";
      message_->DescribeTo(os);
    }
  }

  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have status code " << absl::StatusCodeToString(code_);
    if (message_.has_value()) {
      *os << " or has a message that ";
      message_->DescribeNegationTo(os);
    }
  }

 private:
  absl::StatusCode code_;
  std::optional<::testing::Matcher<const std::string&>> message_;
};

}  // namespace status_matchers_internal

// Matches an OK absl::Status, an absl::StatusOr<T> that holds a value, or an OK grpc::Status.
inline ::testing::PolymorphicMatcher<status_matchers_internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(status_matchers_internal::IsOkMatcher());
}

// Matches an absl::Status or absl::StatusOr<T> whose code is `code`.
inline ::testing::PolymorphicMatcher<status_matchers_internal::StatusIsMatcher> StatusIs(
    absl::StatusCode code) {
  return ::testing::MakePolymorphicMatcher(
      status_matchers_internal::StatusIsMatcher(code, std::nullopt));
}

// As above, and whose message matches `message`: a matcher such as HasSubstr("replicas"), or a
// string that the message must equal.
template <typename MessageMatcher>
::testing::PolymorphicMatcher<status_matchers_internal::StatusIsMatcher> StatusIs(
    absl::StatusCode code, MessageMatcher&& message) {
  return ::testing::MakePolymorphicMatcher(status_matchers_internal::StatusIsMatcher(
      code, ::testing::MatcherCast<const std::string&>(std::forward<MessageMatcher>(message))));
}

}  // namespace kubetrain::testing
