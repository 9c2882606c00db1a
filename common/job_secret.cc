#include "common/job_secret.h"

#include <grpcpp/support/client_interceptor.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace kubetrain {
namespace {

// Adds the secret to the initial metadata of every call on the channel.
class JobSecretInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit JobSecretInterceptor(const std::string* secret) : secret_(secret) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kJobSecretMetadataKey, *secret_);
    }
    methods->Proceed();
  }

 private:
  const std::string* secret_;  // owned by the factory, which the channel keeps alive
};

class JobSecretInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit JobSecretInterceptorFactory(std::string secret) : secret_(std::move(secret)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new JobSecretInterceptor(&secret_);
  }

 private:
  std::string secret_;
};

// Compares without an early exit, so the time taken does not tell how much of a guess matched.
// Lengths may differ in time: every secret the project generates has the same length.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

grpc::Status JobSecretVerifier::Check(const grpc::ServerContextBase& context) const {
  if (secret_.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kJobSecretMetadataKey);
  if (it == metadata.end()) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        absl::StrCat("the call carries no job secret (metadata ", kJobSecretMetadataKey,
                     "); give every task of the job the "
                     "same ",
                     kJobSecretEnv));
  }
  absl::string_view got(it->second.data(), it->second.size());
  if (!ConstantTimeEquals(got, secret_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("the call's job secret is not this job's; give every task of "
                                     "the job the same ",
                                     kJobSecretEnv));
  }
  return grpc::Status::OK;
}

std::shared_ptr<grpc::Channel> CreateJobChannel(const std::string& target,
                                                const grpc::ChannelArguments& args,
                                                const std::string& secret) {
  if (secret.empty()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<JobSecretInterceptorFactory>(secret));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, grpc::InsecureChannelCredentials(), args, std::move(factories));
}

}  // namespace kubetrain
