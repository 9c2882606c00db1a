// The per-job shared secret that keeps strangers away from a job's gRPC services (ps and the
// all-reduce coordinator): without it any client that reaches a ps port could Init (replace every
// parameter) or Shutdown it. docs/decisions/0005-shared-secret-per-job.md gives the design.
//
// Every task of a job gets the same secret: the operator creates one Secret per job and passes it
// to each container as KUBETRAIN_JOB_SECRET; `kubetrain run` generates one per run. Clients send
// it as call metadata on every RPC; servers compare it in constant time and answer
// UNAUTHENTICATED when it is missing or wrong.
//
// The secret authenticates peers; it does not encrypt traffic (no TLS inside the job).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/job_secret_env.h"

namespace kubetrain {

// The metadata key clients send the secret under (gRPC keys are lower-case ASCII).
inline constexpr char kJobSecretMetadataKey[] = "x-kubetrain-job-secret";

// Server side. Thread-safe (immutable after construction).
class JobSecretVerifier {
 public:
  // An empty secret accepts every call (a standalone ps started by hand).
  explicit JobSecretVerifier(std::string secret) : secret_(std::move(secret)) {}

  bool enabled() const { return !secret_.empty(); }

  // OK when the call carries the job's secret; UNAUTHENTICATED otherwise, with a message that
  // says how to fix it. Never logs the secret.
  grpc::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::string secret_;
};

// Client side: a channel whose every call carries the secret (nothing is added when it is
// empty). The channel otherwise behaves as grpc::CreateCustomChannel with insecure credentials.
std::shared_ptr<grpc::Channel> CreateJobChannel(const std::string& target,
                                                const grpc::ChannelArguments& args,
                                                const std::string& secret);

}  // namespace kubetrain
