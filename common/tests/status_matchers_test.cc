#include "common/testing/status_matchers.h"

#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::testing {
namespace {

using ::testing::DescribeMatcher;
using ::testing::ExplainMatchResult;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StringMatchResultListener;

// Stands in for grpc::Status, which this test does not link.
struct FakeRpcStatus {
  int code = 0;
  std::string message;
  bool ok() const { return code == 0; }
  int error_code() const { return code; }
  std::string error_message() const { return message; }
};

TEST(IsOk, MatchesOkStatusAndStatusOrWithAValue) {
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(absl::StatusOr<int>(7), IsOk());
  EXPECT_THAT(absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(7)), IsOk());
  EXPECT_THAT(FakeRpcStatus{}, IsOk());
}

TEST(IsOk, RejectsErrors) {
  EXPECT_THAT(absl::InternalError("boom"), Not(IsOk()));
  EXPECT_THAT(absl::StatusOr<int>(absl::NotFoundError("gone")), Not(IsOk()));
  EXPECT_THAT((FakeRpcStatus{14, "unreachable"}), Not(IsOk()));
}

TEST(IsOk, AFailureExplainsTheStatus) {
  StringMatchResultListener listener;
  EXPECT_FALSE(
      ExplainMatchResult(IsOk(), absl::InvalidArgumentError("replicas must be >= 1"), &listener));
  EXPECT_EQ(listener.str(), "whose status is INVALID_ARGUMENT: replicas must be >= 1");

  StringMatchResultListener or_listener;
  EXPECT_FALSE(ExplainMatchResult(IsOk(), absl::StatusOr<int>(absl::UnavailableError("ps-0")),
                                  &or_listener));
  EXPECT_EQ(or_listener.str(), "whose status is UNAVAILABLE: ps-0");

  StringMatchResultListener rpc_listener;
  EXPECT_FALSE(ExplainMatchResult(IsOk(), FakeRpcStatus{14, "unreachable"}, &rpc_listener));
  EXPECT_EQ(rpc_listener.str(), "whose status is code 14: unreachable");
}

TEST(IsOk, Describes) {
  EXPECT_EQ(DescribeMatcher<absl::Status>(IsOk()), "is OK");
  EXPECT_EQ(DescribeMatcher<absl::Status>(IsOk(), /*negation=*/true), "is not OK");
}

TEST(StatusIs, MatchesTheCode) {
  EXPECT_THAT(absl::NotFoundError("gone"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(absl::StatusOr<int>(absl::NotFoundError("gone")),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(absl::OkStatus(), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(absl::StatusOr<int>(7), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(absl::NotFoundError("gone"), Not(StatusIs(absl::StatusCode::kInternal)));
  EXPECT_THAT(absl::StatusOr<int>(7), Not(StatusIs(absl::StatusCode::kNotFound)));
}

TEST(StatusIs, AppliesTheInnerMatcherToTheMessage) {
  const absl::Status status = absl::InvalidArgumentError("spec.replicas: must be >= 1");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("replicas")));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, "spec.replicas: must be >= 1"));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               std::string("spec.replicas: must be >= 1")));
  EXPECT_THAT(status, Not(StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("image"))));
  EXPECT_THAT(status, Not(StatusIs(absl::StatusCode::kNotFound, HasSubstr("replicas"))));
}

TEST(StatusIs, AFailureExplainsTheStatus) {
  StringMatchResultListener listener;
  EXPECT_FALSE(ExplainMatchResult(StatusIs(absl::StatusCode::kNotFound),
                                  absl::StatusOr<int>(absl::DataLossError("corrupt")), &listener));
  EXPECT_EQ(listener.str(), "whose status is DATA_LOSS: corrupt");
}

TEST(StatusIs, Describes) {
  EXPECT_EQ(DescribeMatcher<absl::Status>(StatusIs(absl::StatusCode::kNotFound)),
            "has status code NOT_FOUND");
  EXPECT_EQ(DescribeMatcher<absl::Status>(StatusIs(absl::StatusCode::kNotFound, HasSubstr("ckpt"))),
            "has status code NOT_FOUND and a message that has substring \"ckpt\"");
}

}  // namespace
}  // namespace kubetrain::testing
