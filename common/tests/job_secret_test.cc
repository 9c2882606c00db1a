#include "common/job_secret.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>

#include "common/testing/status_matchers.h"
#include "kubetrain/v1/coordinator.grpc.pb.h"

namespace kubetrain {
namespace {

using ::kubetrain::testing::IsOk;

// A service whose only rule is the secret check, so the test sees exactly what a ps or the
// coordinator would answer to a stranger.
class GuardedService : public v1::Coordinator::Service {
 public:
  explicit GuardedService(std::string secret) : verifier_(std::move(secret)) {}
  grpc::Status Set(grpc::ServerContext* context, const v1::SetRequest*, v1::SetResponse*) override {
    return verifier_.Check(*context);
  }

 private:
  JobSecretVerifier verifier_;
};

class JobSecretTest : public ::testing::Test {
 protected:
  void Start(const std::string& secret) {
    service_ = std::make_unique<GuardedService>(secret);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  grpc::Status Call(const std::string& secret) {
    auto stub = v1::Coordinator::NewStub(
        CreateJobChannel("127.0.0.1:" + std::to_string(port_), grpc::ChannelArguments(), secret));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::SetRequest request;
    v1::SetResponse response;
    return stub->Set(&context, request, &response);
  }

  std::unique_ptr<GuardedService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(JobSecretTest, CallWithTheJobsSecretIsServed) {
  std::string secret = GenerateJobSecret();
  Start(secret);
  EXPECT_TRUE(Call(secret).ok()) << Call(secret).error_message();
}

TEST_F(JobSecretTest, CallWithoutSecretIsUnauthenticatedWithTheFix) {
  Start(GenerateJobSecret());
  grpc::Status status = Call("");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(status.error_message().find("KUBETRAIN_JOB_SECRET"), std::string::npos)
      << status.error_message();
}

TEST_F(JobSecretTest, CallWithAnotherJobsSecretIsUnauthenticated) {
  std::string secret = GenerateJobSecret();
  Start(secret);
  std::string other = secret;
  other.back() = other.back() == 'a' ? 'b' : 'a';
  grpc::Status status = Call(other);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message().find(secret), std::string::npos) << "the secret leaked";
  EXPECT_EQ(Call(secret.substr(0, 20)).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(JobSecretTest, ServerWithoutSecretServesEveryone) {
  Start("");
  EXPECT_THAT(Call(""), IsOk());
  EXPECT_THAT(Call(GenerateJobSecret()), IsOk());
}

TEST(JobSecret, GeneratedSecretsAreLongDistinctAndValid) {
  std::string a = GenerateJobSecret();
  std::string b = GenerateJobSecret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, b);
  EXPECT_THAT(ValidateJobSecret(a), IsOk());
}

TEST(JobSecret, ValidationNamesTheVariableAndTheRule) {
  EXPECT_THAT(ValidateJobSecret(""), IsOk());
  absl::Status short_secret = ValidateJobSecret("abc");
  EXPECT_EQ(short_secret.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_secret.message().find("KUBETRAIN_JOB_SECRET"), std::string::npos);
  absl::Status newline = ValidateJobSecret("0123456789abcdef\n");
  EXPECT_EQ(newline.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(newline.message().find("offset 16"), std::string::npos) << newline.message();
}

}  // namespace
}  // namespace kubetrain
