// The job's shared secret as a value: where it travels and how one is made and checked
// (docs/decisions/0005-shared-secret-per-job.md). Apart from common/job_secret.h, which puts it
// on gRPC calls, so that code that only makes or names it (rendering, `kubetrain run`) needs no
// gRPC.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kubetrain {

// The environment variable every task reads the secret from.
inline constexpr char kJobSecretEnv[] = "KUBETRAIN_JOB_SECRET";
// The key of the data item in the job's Kubernetes Secret.
inline constexpr char kJobSecretKey[] = "token";

// 32 random bytes from the OS, hex-encoded (64 characters).
std::string GenerateJobSecret();

// Checks a secret read from the environment or a flag: 16 to 1024 printable ASCII characters
// (it travels as a gRPC metadata value). An empty secret is allowed and means "no secret".
absl::Status ValidateJobSecret(absl::string_view secret);

}  // namespace kubetrain
