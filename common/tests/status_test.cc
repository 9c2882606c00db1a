#include "common/status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/status_matchers.h"

namespace kubetrain {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;

absl::Status Fails() { return absl::UnavailableError("ps-0 not reachable"); }
absl::StatusOr<int> Seven() { return 7; }
absl::StatusOr<int> NotFound() { return absl::NotFoundError("no checkpoint"); }

absl::Status PlainReturn() {
  RETURN_IF_ERROR(Fails());
  return absl::OkStatus();
}

absl::Status ReturnWithContext(int step) {
  RETURN_IF_ERROR(Fails(), "pushing gradients at step ", step);
  return absl::OkStatus();
}

absl::StatusOr<int> AssignTwice() {
  ASSIGN_OR_RETURN(int a, Seven());
  ASSIGN_OR_RETURN(int b, Seven(), "second");
  return a + b;
}

absl::StatusOr<int> AssignFails() {
  ASSIGN_OR_RETURN(int a, NotFound(), "restoring ", "/ckpt");
  return a;
}

TEST(StatusMacros, ReturnIfErrorPassesErrorThroughUnchanged) {
  absl::Status s = PlainReturn();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "ps-0 not reachable");
}

TEST(StatusMacros, ContextIsPrependedAndCodeKept) {
  absl::Status s = ReturnWithContext(42);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "pushing gradients at step 42: ps-0 not reachable");
}

TEST(StatusMacros, AssignOrReturnAssignsValues) { EXPECT_EQ(*AssignTwice(), 14); }

TEST(StatusMacros, AssignOrReturnReturnsAnnotatedError) {
  absl::StatusOr<int> r = AssignFails();
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kNotFound, "restoring /ckpt: no checkpoint"));
}

TEST(Annotate, LeavesOkAlone) { EXPECT_THAT(Annotate(absl::OkStatus(), "ctx"), IsOk()); }

}  // namespace
}  // namespace kubetrain
